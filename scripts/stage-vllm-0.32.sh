#!/usr/bin/env bash
# Stage vLLM 0.32.0 with torch 2.13, its triton and the CUDA 13 libraries it
# needs for the lent GPU machine (Python 3.12, torch 2.11.0+cu130, no network).
#
# Run from the project root where the package registry is reachable:
#   scripts/stage-vllm-0.32.sh            # resolve, download, pack into .device/v032/
#   scripts/stage-vllm-0.32.sh --dry-run  # resolve only: list the wheels and their sizes
# docs/gpu-staging.md says how many device calls it costs and how to make them.
#
# How: pip resolves vllm==0.32.0 for cp312/manylinux x86_64; every wheel the
# machine already has in exactly that version (scripts/gpu-base-cu130.txt) is
# left out; the rest is downloaded, vLLM's kernels that dense models on sm_90
# never load are dropped (as in the 0.20 recipe), and one xz stream of it all
# is cut into chunks of CHUNK_MB (default 60, so that a chunk plus the
# working tree stays under the 64 MiB a call carries).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(git rev-parse --show-toplevel)
dest="$root/.device/v032"
chunk_mb=${CHUNK_MB:-60}
dry=0; [ "${1:-}" = --dry-run ] && dry=1
# .device/ must never be committed nor travel uncarried; the 0.20 recipe keeps
# it out the same way (worktrees share this file).
exclude="$(git rev-parse --git-common-dir)/info/exclude"
mkdir -p "$(dirname "$exclude")"
grep -qx '/.device/' "$exclude" 2>/dev/null || echo '/.device/' >> "$exclude"

work=${STAGE_WORK:-$(mktemp -d)}
[ -z "${STAGE_WORK:-}" ] && trap 'rm -rf "$work"' EXIT
# pip matches manylinux tags exactly; NCCL's and CUDA's wheels use several.
plat=(--only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 --abi abi3 --abi none)
for n in $(seq 5 39); do plat+=(--platform "manylinux_2_${n}_x86_64"); done
plat+=(--platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform linux_x86_64 --platform any)

echo "[stage] resolving vllm==0.32.0 for cp312 x86_64"
python3 -m pip install -q --dry-run --ignore-installed --target "$work/never" "${plat[@]}" \
  --report "$work/report.json" vllm==0.32.0
python3 - "$work/report.json" "$here/gpu-base-cu130.txt" "$work/need.txt" <<'PY'
import json, sys
from packaging.utils import canonicalize_name as cn
have = set()
for line in open(sys.argv[2]):
    line = line.split("#")[0].strip()
    if line:
        n, v = line.split("==")
        have.add((cn(n), v))
need = []
for i in json.load(open(sys.argv[1]))["install"]:
    m = i["metadata"]
    (need if (cn(m["name"]), m["version"]) not in have else []).append(f'{m["name"]}=={m["version"]}')
open(sys.argv[3], "w").write("\n".join(sorted(need, key=str.lower)) + "\n")
print(f"[stage] {len(need)} wheels to send, {len(have)} already on the GPU machine")
PY

echo "[stage] downloading"
python3 -m pip download -q --no-deps "${plat[@]}" -d "$work/wheels" -r "$work/need.txt"
du -b "$work/wheels"/*.whl | sort -n | awk '{t+=$1; printf "%8.1f MB  %s\n", $1/1e6, $2} END {printf "%8.1f MB  total\n", t/1e6}' \
  | sed "s#$work/wheels/##"
[ "$dry" = 1 ] && { echo "[stage] dry run: nothing packed"; exit 0; }

echo "[stage] trimming vllm (no FA2, MoE, DeepGEMM, FlashMLA: not loaded by dense models on sm_90)"
python3 - "$work/wheels"/vllm-0.32.0-*.whl <<'PY'
import os, sys, zipfile
drop = ("vllm/vllm_flash_attn/_vllm_fa2_C", "vllm/_moe_C", "vllm/third_party/deep_gemm/", "vllm/_flashmla")
src = sys.argv[1]
with zipfile.ZipFile(src) as z, zipfile.ZipFile(src + ".new", "w", zipfile.ZIP_DEFLATED) as out:
    for m in z.infolist():
        if not m.filename.startswith(drop):
            out.writestr(m, z.read(m))
os.replace(src + ".new", src)
PY

echo "[stage] packing into ${chunk_mb} MB chunks"
rm -rf "$dest" && mkdir -p "$dest/tools"
# Wheels are already deflated, so xz gains little over them; it still packs
# the step in one stream that the device unpacks only once all parts are in.
tar cf - -C "$work" wheels | xz -${XZ_LEVEL:-6} -T0 | split -b "${chunk_mb}000000" -d -a 2 - "$dest/part_"
n=$(ls "$dest"/part_* | wc -l)
for p in "$dest"/part_*; do mkdir "$dest/c_${p##*_}"; mv "$p" "$dest/c_${p##*_}/"; done
echo "$n" > "$dest/tools/count"
cp "$here/device-step-0.32.sh" "$dest/tools/"
du -sh "$dest"/c_* | tail -3; du -sh "$dest"
echo "[stage] done: $n chunks. Send them in order, back to back (docs/gpu-staging.md):"
for c in "$dest"/c_*; do echo "  carry [.device/v032/tools, .device/v032/${c##*/}]  command: bash .device/v032/tools/device-step-0.32.sh"; done
