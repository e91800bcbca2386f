#!/usr/bin/env bash
# vLLM 0.34 on the lent GPU, after the staging's last call (docs/gpu-staging.md).
#   bash scripts/gpu-034-measure.sh spec   the plugin's adaptive policy over
#       SPEC_METHODS (default: suffix, then ngram) against stock speculating
#       with the same k and against no speculation (gpu-check.sh e2e-spec-methods)
#   bash scripts/gpu-034-measure.sh trace  TRACE_METHODS (default suffix) on
#       TRACE_WORKLOADS (default ":agentic") replayed from real text
#       (gpu-check.sh e2e-trace)
#   bash scripts/gpu-034-measure.sh sampling  no speculation: top-k/top-p and
#       seeded top-p, the plugin against stock, 8B, 64 and 256 sequences
#       (gpu-check.sh e2e-8b-all)
# Each step is bounded by STEP_TIMEOUT; what matters is copied under $OUT
# (the device tool brings back at most 8 files, two folders down).
set -uo pipefail
# The environment the staging's last call wrote (PYTHONPATH with vLLM and the
# CuTe DSL's package folder, which 0.34's kernel warm-up imports for every model).
site=${VLLM_SITE:-/tmp/vllm-site}
. "$site/env.sh" || { echo "no $site/env.sh: stage vLLM 0.34 first (docs/gpu-staging.md)"; exit 1; }
python3 -c "import cutlass, quack" || { echo "the staging lacks the CuTe DSL or quack: stage 0.34 again (docs/gpu-staging.md)"; exit 1; }
work=${WORK:-/tmp/gpu-034}
mkdir -p "$work"
python3 -m vllm_sampling_plugin.cli info > "$OUT/info.txt" 2>&1
head -3 "$OUT/info.txt"
keep() {  # keep PREFIX FILE...: copy the files that exist under $OUT, named PREFIX-NAME
  local prefix=$1; shift
  for f in "$@"; do [ -f "$f" ] && cp "$f" "$OUT/$prefix-$(basename "$f")"; done
}
case ${1:-spec} in
  spec)
    for method in ${SPEC_METHODS:-suffix ngram}; do
      OUT=$work SPEC_METHOD=$method bash scripts/gpu-check.sh e2e-spec-methods
      keep "$method" "$work"/e2e-spec-methods-"$method"-k*/e2e.json \
        "$work"/e2e-spec-methods-"$method"-k*.log
    done ;;
  trace)
    OUT=$work TRACE_METHODS=${TRACE_METHODS:-suffix} TRACE_WORKLOADS=${TRACE_WORKLOADS:-:agentic} \
      bash scripts/gpu-check.sh e2e-trace
    keep trace "$work"/workloads/stats.json
    for method in ${TRACE_METHODS:-suffix}; do
      keep "$method" "$work"/e2e-trace-"$method"-k*/e2e.json "$work"/e2e-trace-"$method"-k*/*.png \
        "$work"/e2e-trace-"$method"-k*.log
    done ;;
  sampling)
    OUT=$work E2E_ARGS="--mixes topk_topp,seeded_topp ${E2E_ARGS:-}" \
      bash scripts/gpu-check.sh e2e-8b-all
    keep sampling "$work"/e2e-8b-all/e2e.json "$work"/e2e-8b-all/e2e.png "$work"/e2e-8b-all.log ;;
  *) echo "usage: $0 spec|trace|sampling" >&2; exit 2 ;;
esac
keep run "$work/failed-steps" "$work/flashinfer-sampling-build.log"
exit 0
