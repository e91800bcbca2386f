#!/usr/bin/env bash
# Run GPU test groups and benchmarks, logging each under OUT (default ./gpu-results).
# Usage: scripts/gpu-check.sh STEP...   STEP: ops | ngram | rejection | topk | e2e | bench-sampler |
#        bench-topk | bench-rejection | bench-ngram | info
# Each step is bounded by STEP_TIMEOUT seconds (default 420) and never stops the others.
set -uo pipefail
out=${OUT:-gpu-results}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
limit=${STEP_TIMEOUT:-420}
run() {
  local name=$1; shift
  echo "=== $name: $*"
  local t0=$SECONDS
  timeout "$limit" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  echo "=== $name rc=$rc in $((SECONDS - t0)) s"
  tail -n "${TAIL:-25}" "$out/$name.log"
}
for step in "$@"; do
  case $step in
    info) run info vllm-sampling-plugin info ;;
    ops) run ops python3 -m pytest -q -p no:cacheprovider tests/ops/test_gumbel.py tests/ops/test_sample.py tests/ops/test_masking.py tests/ops/test_flashinfer.py ;;
    ngram) run ngram python3 -m pytest -q -p no:cacheprovider tests/ops/test_ngram.py tests/integration/test_ngram_speculator.py ;;
    rejection) run rejection python3 -m pytest -q -p no:cacheprovider tests/ops/test_rejection.py ;;
    topk) run topk python3 -m pytest -q -p no:cacheprovider tests/ops/test_topk_topp.py ;;
    e2e) run e2e python3 -m pytest -q -s -p no:cacheprovider tests/e2e ;;
    e2e-parallel)
      # The tiny engines take ~12% of the GPU each: run the groups side by side.
      for group in "ngram_speculation and False" "ngram_speculation and True" \
                   "rejection_methods"; do
        name="e2e-${group// /_}"
        run "$name" python3 -m pytest -q -s -p no:cacheprovider tests/e2e -k "$group" &
      done
      wait
      # vLLM's memory profiling fails when other engines free memory meanwhile;
      # the sampler engines run after the others.
      run e2e-sampler python3 -m pytest -q -s -p no:cacheprovider tests/e2e -k sampler ;;
    bench-sampler) run bench-sampler python3 -m vllm_sampling_plugin.bench.sampler --out "$out/sampler" ;;
    bench-topk) run bench-topk python3 -m vllm_sampling_plugin.bench.topk_topp --out "$out/topk_topp" ;;
    bench-rejection) run bench-rejection python3 -m vllm_sampling_plugin.bench.rejection --out "$out/rejection" ;;
    bench-ngram) run bench-ngram python3 -m vllm_sampling_plugin.bench.ngram --out "$out/ngram" ;;
    *) echo "unknown step $step" ;;
  esac
done
