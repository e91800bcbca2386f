#!/usr/bin/env bash
# Issue 63's trace cells, one step after another, for a plan that outlasts one
# device call (`bash scripts/gpu-background.sh start scripts/gpu-034-trace-plan.sh
# STEP...`, after the vLLM 0.34 staging's last call). Each STEP is
#   WORKLOADS:METHOD:SECONDS[:CONCURRENCIES[:KV_GIB]]
# e.g. agentic:suffix:700:16,64:11 or code-edit,chat:ngram:700:1,16,64
# (WORKLOADS comma-separated: one set of engines serves them all, so their
# start-up, most of a step's time, is paid once; defaults: 16,64 sequences, 11 GiB of KV
# cache an engine, enough for 64 agentic or code-edit requests; two engines at
# a time). Every step runs `scripts/gpu-034-measure.sh trace` on one workload
# and method (no speculation, upstream's fixed k, upstream's adaptive
# verification where the method accepts it, the plugin's policy and its A/A
# twin, each run N x concurrency requests with N = 1) in a folder of its own,
# its results under $PLAN_OUT/WORKLOAD-METHOD. The workloads come from
# $WORKLOADS (default /tmp/gpu-034/workloads: copy the carried build there);
# PLAN_E2E_ARGS adds bench e2e options to every step; PLAN_WORK names the
# steps' folders' root (default /tmp/gpu-034/plan).
set -uo pipefail
src=${WORKLOADS:-/tmp/gpu-034/workloads}
# The A/A twin runs in the same rotations as the pair where three engines
# with the steps' KV caches fit the GPU (an H200: 3 x about 29 GiB at 11 GiB
# of KV cache), and after the other cells elsewhere (an H100 holds two).
gpu_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -n 1)
twin="" where="after the other cells"
if [ "${gpu_mib:-0}" -gt 100000 ]; then
  twin="--control-alongside --gpu-memory-utilization 0.3" where="alongside"
fi
echo "=== GPU memory ${gpu_mib:-unknown} MiB: the A/A twin runs $where"
: "${PLAN_OUT:?run me through scripts/gpu-background.sh start, which names PLAN_OUT}"
for step in "$@"; do
  IFS=: read -r workload method seconds seqs kv <<< "$step"
  name=${workload//,/+}-$method
  work=${PLAN_WORK:-/tmp/gpu-034/plan}/$name
  mkdir -p "$work/workloads" "$PLAN_OUT/$name"
  for one in ${workload//,/ }; do
    cp "$src/$one.jsonl" "$work/workloads/" || exit 1
  done
  cp "$src/stats.json" "$work/workloads/" || exit 1
  # The cells so far of the step in flight travel with every wait too: bench
  # e2e saves its JSON after each cell, the measure script copies it at the end.
  ln -sfn "$work/e2e-trace-$method-k${SPEC_K:-3}" "$PLAN_OUT/$name/in-flight"
  ln -sfn "$work/e2e-trace-$method-k${SPEC_K:-3}.log" "$PLAN_OUT/$name/in-flight.log"
  echo "=== $(date +%T) $name: $seconds s, ${seqs:-16,64} sequences"
  WORK=$work OUT=$PLAN_OUT/$name STEP_TIMEOUT=$seconds TRACE_METHODS=$method \
    TRACE_WORKLOADS=":$workload" \
    E2E_ARGS="--max-num-seqs ${seqs:-16,64} --requests-per-seq 1 --kv-cache-gib ${kv:-11} --control $twin ${PLAN_E2E_ARGS:-}" \
    bash scripts/gpu-034-measure.sh trace
done
