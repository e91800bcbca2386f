#!/usr/bin/env bash
# vLLM 0.34 on the lent GPU, after the staging's last call (docs/gpu-staging.md):
# the plugin's adaptive policy over SPEC_METHODS (suffix, then ngram) against
# stock speculating with the same k and against no speculation, each method a
# step of scripts/gpu-check.sh bounded by STEP_TIMEOUT; what matters is copied
# under $OUT (the device tool brings back at most 8 files).
set -uo pipefail
export PYTHONPATH=/tmp/vllm-site PYTORCH_SKIP_CUDNN_COMPATIBILITY_CHECK=1
work=/tmp/gpu-034
mkdir -p "$work"
python3 -m vllm_sampling_plugin.cli info > "$OUT/info.txt" 2>&1
head -3 "$OUT/info.txt"
for method in ${SPEC_METHODS:-suffix ngram}; do
  OUT=$work SPEC_METHOD=$method bash scripts/gpu-check.sh e2e-spec-methods
  for f in "$work"/e2e-spec-methods-"$method"-k*/*.json "$work"/e2e-spec-methods-"$method"-k*.log; do
    [ -f "$f" ] && cp "$f" "$OUT/$method-$(basename "$f")"
  done
done
cp "$work/failed-steps" "$work/flashinfer-sampling-build.log" "$OUT/" 2>/dev/null
exit 0
