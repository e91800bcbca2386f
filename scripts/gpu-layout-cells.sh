#!/usr/bin/env bash
# Issue 60's last GPU cells on one staged line, as a plan that outlasts a
# device call (`bash scripts/gpu-background.sh start scripts/gpu-layout-cells.sh
# LINE`, LINE 0.20 or 0.33, after that line's staging: docs/gpu-staging.md,
# "Issue 60's last cells"). Writes under $PLAN_OUT:
#   tokens/     where .device/before (an older revision of the package) and
#               .device/tools/make_tiny_model.py were carried: the engine
#               tokens of both revisions on a tiny Llama (scripts/dump_engine_tokens.py)
#               and whether they are identical;
#   ab/, aa/    one 8B top-k/top-p cell (vocab 151936, 256 sequences): stock
#               against the plugin, then stock against a stock twin (the A/A
#               pair that says what the noise is), engines started together.
set -uo pipefail
line=${1:?usage: gpu-layout-cells.sh LINE (0.20 or 0.33)}
: "${PLAN_OUT:?run me through scripts/gpu-background.sh start, which names PLAN_OUT}"
if [ -f /tmp/vllm-site/env.sh ]; then . /tmp/vllm-site/env.sh; else export PYTHONPATH=/tmp/vllm-site; fi
export VLLM_USE_V2_MODEL_RUNNER=1
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
git log --oneline -1
python3 -c "import vllm; print('vllm', vllm.__version__)"

if [ -d .device/before ] && [ -f .device/tools/make_tiny_model.py ]; then
  mkdir -p "$PLAN_OUT/tokens"
  echo "=== $(date +%T) tokens before and after on a tiny Llama"
  python3 .device/tools/make_tiny_model.py /tmp/tiny
  # Both revisions at once (each engine takes 0.3 of the GPU): the engine
  # starts, not the tokens, take the time.
  PYTHONPATH=$PWD/.device/before:$PYTHONPATH python3 scripts/dump_engine_tokens.py /tmp/tiny \
    "$PLAN_OUT/tokens/before.json" > "$PLAN_OUT/tokens/before.log" 2>&1 &
  python3 scripts/dump_engine_tokens.py /tmp/tiny "$PLAN_OUT/tokens/after.json" \
    > "$PLAN_OUT/tokens/after.log" 2>&1
  wait
  python3 - "$PLAN_OUT/tokens/before.json" "$PLAN_OUT/tokens/after.json" <<'PY' | tee "$PLAN_OUT/tokens/compare.txt"
import json
import sys
before, after = (json.load(open(path)) for path in sys.argv[1:])
print("before:", before.pop("package"), "after:", after.pop("package"))
for cell in before:
    rows = sum(len(row) for row in before[cell])
    print(cell, rows, "tokens", "identical" if before[cell] == after.get(cell) else "DIFFERENT")
PY
fi

extra=()
[ "$line" != 0.20 ] && extra=(--attention-backend FLASH_ATTN)
for side in ab aa; do
  echo "=== $(date +%T) 8B top-k/top-p, $side"
  python3 -m benchmarks e2e --models 8b:151936 --mixes topk_topp --max-num-seqs 256 \
    --pairs 4 --num-requests 256 --output-len 128 --breakdown-mixes none \
    --gpu-memory-utilization 0.45 --kv-cache-gib 8 --max-cudagraph-capture-size 256 --start-together \
    "${extra[@]}" $([ $side = aa ] && echo --control) --out "$PLAN_OUT/$side" \
    > "$PLAN_OUT/$side.log" 2>&1
  grep -E "topk_topp" "$PLAN_OUT/$side.log" | tail -n 3
done
echo "=== $(date +%T) done"
