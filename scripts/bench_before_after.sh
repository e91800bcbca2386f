#!/usr/bin/env bash
# Run one benchmark area with an older copy of the package and with this
# checkout's, same arguments, one after the other, then compare timings and tokens.
# Usage: scripts/bench_before_after.sh BEFORE_DIR OUT AREA [ARGS...]
#   BEFORE_DIR: a directory holding the older vllm_sampling_plugin/ package and its
#               benchmarks/, e.g.
#               mkdir before && git archive COMMIT vllm_sampling_plugin benchmarks | tar -x -C before
#               (a commit from before benchmarks/ left the package has none: this
#               checkout's benchmarks/ then times the older package)
#   OUT:        OUT/AREA/{before,after}/ get each run's JSON, tokens.pt and log
# Environment: TOLERANCE (percent, default 3), MIN_US (skip faster old timings, default 0).
set -uo pipefail
before=$(realpath "$1")
out=$(realpath -m "$2/$3")
area=$3
shift 3
checkout=$PWD
for side in before after; do
  mkdir -p "$out/$side"
  # `python3 -m` puts the working directory first on sys.path: that picks the
  # package (and its benchmarks/, if it has one); PYTHONPATH comes after it.
  if [ "$side" = before ]; then dir=$before; else dir=$checkout; fi
  (cd "$dir" && PYTHONPATH="$checkout${PYTHONPATH:+:$PYTHONPATH}" python3 -m "benchmarks.$area" --out "$out/$side" \
      --dump-tokens "$out/$side/tokens.pt" "$@") > "$out/$side/log.txt" 2>&1
  echo "=== $area $side rc=$?"
  tail -n 25 "$out/$side/log.txt"
done
python3 scripts/bench_compare.py timings "$out/before/$area.json" "$out/after/$area.json" \
  --tolerance "${TOLERANCE:-3}" --min-us "${MIN_US:-0}" | tail -n 40
echo "=== timings rc=${PIPESTATUS[0]}"
python3 scripts/bench_compare.py tokens "$out/before/tokens.pt" "$out/after/tokens.pt"
echo "=== tokens rc=$?"
