#!/usr/bin/env bash
# Stage a vLLM newer than the machine's stack (0.32.0: torch 2.13, triton
# 3.7.1; 0.33.0 and 0.34.0: torch 2.14, triton 3.8.0) with the CUDA 13
# libraries it needs for the lent GPU machine (Python 3.12, torch
# 2.11.0+cu130, no network).
#
# Run from the project root where the package registry is reachable:
#   scripts/stage-vllm-newer.sh 0.33.0            # resolve, download, pack into .device/v033/
#   scripts/stage-vllm-newer.sh 0.33.0 --dry-run  # resolve only: list the wheels and their sizes
#   scripts/stage-vllm-newer.sh 0.34.0            # flashinfer-python overridden (ci/overrides-0.34.txt)
# docs/gpu-staging.md says how many device calls it costs and how to make them.
#
# How: pip resolves vllm==VERSION for cp312/manylinux x86_64 (with the pins
# ci/overrides-LINE.txt names replaced: 0.34.0 pins a flashinfer-python the
# package registry does not serve); every wheel the
# machine already has in exactly that version (scripts/gpu-base-cu130.txt) is
# left out, and so is every wheel on the exclusion list below (not imported on
# the dense-model path, or already on the machine in a version that serves);
# the rest is downloaded, vLLM's kernels that dense models on sm_90 never load
# are dropped (as in the 0.20 recipe), and one xz stream of it all is cut into
# chunks of CHUNK_MB (default: what the 64 MiB a call carries leaves beside
# the tracked working tree, less 4 MiB for what the copy adds, at most 60; a
# 60 MB chunk stopped fitting once the tree passed about 6.4 MiB). The device
# step installs with --no-deps, so pip there never asks for what was left out.
#
# STAGE_SEND_CUDA_LIBS=1 sends cuBLAS, cuDNN and cuSPARSELt anyway (section B
# of the list), for a machine whose own copies are not the ones named there.
#
# FlashInfer's sampling module is built here and sent prebuilt (below); it
# needs nvcc and gcc here, and the staging stops where it cannot build it
# (STAGE_FLASHINFER_AOT=0 sends none, and stock engines then compile it on
# the GPU machine for minutes).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(git rev-parse --show-toplevel)
version=${1:?usage: scripts/stage-vllm-newer.sh VERSION [--dry-run], e.g. 0.33.0}
line=$(echo "$version" | cut -d. -f1,2)   # 0.33
tag="v${line//./}"                        # v033: .device/v033, /tmp/vllm-v033-*
dest="$root/.device/$tag"
tree_bytes=$(git -C "$root" ls-files -z | xargs -0 -r stat -c %s | awk '{s += $1} END {print s + 0}')
room_mb=$(( (64 * 1048576 - tree_bytes - 4 * 1048576) / 1000000 ))
chunk_mb=${CHUNK_MB:-$(( room_mb < 60 ? room_mb : 60 ))}
dry=0; [ "${2:-}" = --dry-run ] && dry=1
# .device/ must never be committed nor travel uncarried; the 0.20 recipe keeps
# it out the same way (worktrees share this file).
exclude="$(git rev-parse --git-common-dir)/info/exclude"
mkdir -p "$(dirname "$exclude")"
grep -qx '/.device/' "$exclude" 2>/dev/null || echo '/.device/' >> "$exclude"

flashinfer_aot=${STAGE_FLASHINFER_AOT:-1}
if [ "$dry" = 0 ] && [ "$flashinfer_aot" = 1 ] && ! command -v nvcc >/dev/null; then
  echo "[stage] STOP: no nvcc here to build FlashInfer's sampling module (CUDA 13: put its bin/ on PATH);" \
    "STAGE_FLASHINFER_AOT=0 stages without it, and stock engines then compile it on the GPU machine" >&2
  exit 1
fi
# FlashInfer's import, in the build below, needs a torch (and the filelock
# torch brings) in this python3: a fresh machine before the README's set-up
# has neither, and the build would fail only after the downloads.
if [ "$dry" = 0 ] && [ "$flashinfer_aot" = 1 ] && ! python3 -c "import torch, filelock" 2>/dev/null; then
  echo "[stage] STOP: python3 here has no torch (or filelock) for FlashInfer's import in the sampling module's build: run the README's set-up (python3 -m pip install -e '.[test]') first, or STAGE_FLASHINFER_AOT=0" >&2
  exit 1
fi
overrides=$root/ci/overrides-$line.txt

work=${STAGE_WORK:-$(mktemp -d)}
[ -z "${STAGE_WORK:-}" ] && trap 'rm -rf "$work"' EXIT
# pip matches manylinux tags exactly; NCCL's and CUDA's wheels use several.
plat=(--only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 --abi abi3 --abi none)
for n in $(seq 5 39); do plat+=(--platform "manylinux_2_${n}_x86_64"); done
plat+=(--platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform linux_x86_64 --platform any)

# The resolution, one name==version a line, in $work/resolved.txt: pip's,
# for every line. pip's resolver cannot replace a pin, so where
# ci/overrides-LINE.txt names one (0.34.0 pins a flashinfer-python the package
# registry does not serve), pip resolves vLLM's own requirements with those
# pins replaced, and vLLM joins the result. uv's --override resolved 0.34.0
# otherwise than pip resolves 0.33.0 (cuda-python 12.6.2.post1, whose files
# overwrite cuda-bindings 13.5.0's, where pip takes 13.4.4 for both).
report_to_resolved() {
  python3 -c 'import json, sys
for i in json.load(open(sys.argv[1]))["install"]:
    print(i["metadata"]["name"] + "==" + i["metadata"]["version"])' "$work/report.json"
}
if [ -f "$overrides" ]; then
  echo "[stage] resolving vllm==$version for cp312 x86_64, its pins overridden: $(grep -v '^#' "$overrides" | xargs)"
  python3 -m pip download -q --no-deps "${plat[@]}" -d "$work/wheels" "vllm==$version"
  python3 - "$work"/wheels/vllm-"$version"-*.whl "$overrides" > "$work/requirements.txt" <<'PY'
import sys, zipfile
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name as cn
with zipfile.ZipFile(sys.argv[1]) as wheel:
    metadata = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
    lines = wheel.read(metadata).decode().splitlines()
overrides = {cn(Requirement(l).name): l.strip() for l in open(sys.argv[2]) if l.strip() and not l.startswith("#")}
for line in lines:
    if line.startswith("Requires-Dist: "):
        req = Requirement(line.removeprefix("Requires-Dist: "))
        if req.marker is None or "extra" not in str(req.marker):  # an extra's requirements stay out, as for pip
            print(overrides.get(cn(req.name), str(req)))
PY
  python3 -m pip install -q --dry-run --ignore-installed --target "$work/never" "${plat[@]}" \
    --report "$work/report.json" -r "$work/requirements.txt"
  { report_to_resolved; echo "vllm==$version"; } > "$work/resolved.txt"
else
  echo "[stage] resolving vllm==$version for cp312 x86_64"
  python3 -m pip install -q --dry-run --ignore-installed --target "$work/never" "${plat[@]}" \
    --report "$work/report.json" "vllm==$version"
  report_to_resolved > "$work/resolved.txt"
fi
# What is left out, and why; docs/gpu-staging.md has the evidence. An import
# of vLLM's whole dense serving path (engine, `vllm serve`'s API server, the
# V2 GPU model runner and its samplers, the FLASH_ATTN, TRITON_ATTN and
# FLASHINFER backends, Llama, the project) with the packages of list A absent
# passes the same 309 imports as with them (scripts/stage-probe-0.32.py), and
# every place vLLM, FlashInfer, torch or transformers imports them is lazy,
# guarded, or on a path a dense model on sm_90 does not take. The 0.33.0
# resolution names the same packages (checked 2026-11-25). One entry a line: a requirement, then why. An
# entry with a version is one the machine must have instead: the device step
# checks those (and scripts/gpu-base-cu130.txt) on its first call.
cat > "$work/exclude.txt" <<'LIST'
# A. Not imported on the dense-model path.
tokenspeed-mla                 MLA attention backends only (DeepSeek-style models), imported lazily there
tokenspeed-triton              needed only by tokenspeed-mla
nvidia-cutlass-dsl             CuTe DSL: `cutlass` is importable only through a .pth file, which Python reads in site directories, not on PYTHONPATH (0.34 sends it: below)
nvidia-cutlass-dsl-libs-base   CuTe DSL, as above
nvidia-cutlass-dsl-libs-core   CuTe DSL, as above
nvidia-cutlass-dsl-libs-cu12   CuTe DSL, as above (and the CUDA 12 build)
nvidia-cutlass-dsl-libs-cu13   CuTe DSL, as above
quack-kernels                  imports cutlass at its top; used by FA4 (cute) and sm_100 kernels, while sm_90 runs FA3 (0.34 sends it: below)
humming-kernels                mixed-precision quantization kernels; vLLM asks has_humming() and goes without
nvidia-cuda-nvcc               needed only by humming-kernels[cu13]; FlashInfer's JIT uses the machine's nvcc (CUDA_HOME, `which nvcc`, /usr/local/cuda), Triton its own ptxas
nvidia-nvvm                    needed only by nvidia-cuda-nvcc
nvidia-cuda-crt                needed only by nvidia-cuda-nvcc
nvidia-cuda-cccl               needed only by humming-kernels[cu13]; FlashInfer ships its own CCCL headers
tilelang                       imported lazily for mHC kernels and by the JIT monitor, both guarded (has_tilelang(), try/except)
z3-solver                      needed only by tilelang; torch imports z3 in try/except, for debug-only translation validation
pynvvideocodec                 GPU video decoding, imported inside the decoder function only
torchcodec                     audio and video decoding: vLLM imports it in try/except ImportError, transformers only if installed
nccl4py                        the `nccl` Python package: FlashInfer's MoE expert parallelism and vLLM's m2n weight transfer, both lazy
nccl-extensions                the same `nccl` package, the same users
instanttensor                  imported only for --load-format instanttensor
# A'. On the machine in a version that the pins accept.
nvidia-nvjitlink>=13.0.88,<14  cuda-toolkit 13.0.3 (torch 2.13 and 2.14) asks for >=13.0.88,<14; pip picked the newest, 13.5.37; the machine has 13.0.88
LIST
# B. On the machine in a version torch 2.13 and 2.14 load: every symbol their
# libraries take from these is exported by the machine's copy (nm over the
# wheels of exactly those versions), torch's preload finds them on sys.path
# after /tmp/vllm-site, and torch 2.13 imports against exactly that set (seen
# on a CPU machine whose python3 holds torch 2.11.0's cu130 set). NCCL is not
# here: torch 2.13 and 2.14 use NCCL symbols that the machine's 2.28.9 lacks,
# and the import fails there (undefined symbol: ncclCommResume).
# From 0.34 the kernel warm-up imports the MiniMax-M3 MSA warm-up for every
# model (under current_platform.is_cuda()), which imports the CuTe DSL and
# quack: an engine without them fails to start (seen on an H100, 2026-12-06).
# The DSL's CUDA 13 build and quack are sent; the device step names the DSL's
# package folder on PYTHONPATH in place of its .pth file.
if [ "$(printf '%s\n' 0.34 "$line" | sort -V | head -1)" = 0.34 ]; then
  sed -i -E '/^(nvidia-cutlass-dsl(-libs-(base|core|cu13))?|quack-kernels) /d' "$work/exclude.txt"
fi
[ "${STAGE_SEND_CUDA_LIBS:-0}" = 1 ] || cat >> "$work/exclude.txt" <<'LIST'
nvidia-cublas==13.1.0.3          torch 2.13 and 2.14 pin 13.1.1.3
nvidia-cudnn-cu13==9.19.0.56     torch 2.13 pins 9.20.0.48, 2.14 9.24.0.43; torch.backends.cudnn's minor-version check raises when reached (cuDNN paths: conv, RNN; none on a dense model), and the device step's export line turns it into a warning
nvidia-cusparselt-cu13==0.8.0    torch 2.13 and 2.14 pin 0.8.1
LIST
python3 - "$work/resolved.txt" "$here/gpu-base-cu130.txt" "$work/need.txt" "$work/exclude.txt" "$work/machine-expects.txt" <<'PY'
import os, sys
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name as cn
have = set()
for line in open(sys.argv[2]):
    line = line.split("#")[0].strip()
    if line:
        n, v = line.split("==")
        have.add((cn(n), v))
excl, expects = {}, [l.split("#")[0].strip() for l in open(sys.argv[2])]
for line in open(sys.argv[4]):
    if line.strip() and not line.startswith("#"):
        req = Requirement(line.split()[0])
        excl[cn(req.name)] = req
        if req.specifier:
            expects.append(str(req))
need, left, seen = [], [], set()
for line in open(sys.argv[1]):
    line = line.split("#")[0].strip()
    if not line:
        continue
    name, resolved_version = line.split("==")
    key = (cn(name), resolved_version)
    seen.add(key[0])
    if key in have:
        continue
    (left if key[0] in excl else need).append(line)
stale = sorted(set(excl) - seen)
if stale:
    # The resolution changed: an exclusion that matches nothing is a sign that
    # the list needs reading again, not something to skip silently. Older
    # lines (0.21-0.31) never resolve some of the newest entries; there
    # STAGE_ALLOW_UNRESOLVED=1 names them and goes on.
    message = f"[stage] excluded but not resolved: {stale}"
    if os.environ.get("STAGE_ALLOW_UNRESOLVED") != "1":
        sys.exit(message + " (STAGE_ALLOW_UNRESOLVED=1 goes on)")
    print(message)
open(sys.argv[3], "w").write("\n".join(sorted(need, key=str.lower)) + "\n")
open(sys.argv[5], "w").write("\n".join(e for e in expects if e) + "\n")
print(f"[stage] {len(need)} wheels to send, {len(have)} already on the GPU machine, {len(left)} left out:")
for x in sorted(left, key=str.lower):
    print(f"  - {x}")
PY

echo "[stage] downloading"
python3 -m pip download -q --no-deps "${plat[@]}" -d "$work/wheels" -r "$work/need.txt"
du -b "$work/wheels"/*.whl | sort -n | awk '{t+=$1; printf "%8.1f MB  %s\n", $1/1e6, $2} END {printf "%8.1f MB  total\n", t/1e6}' \
  | sed "s#$work/wheels/##"
[ "$dry" = 1 ] && { echo "[stage] dry run: nothing packed"; exit 0; }

echo "[stage] trimming vllm (no FA2, MoE, DeepGEMM, FlashMLA: not loaded by dense models on sm_90)"
python3 - "$work/wheels"/vllm-"$version"-*.whl <<'PY'
import os, sys, zipfile
drop = ("vllm/vllm_flash_attn/_vllm_fa2_C", "vllm/_moe_C", "vllm/third_party/deep_gemm/", "vllm/_flashmla")
src = sys.argv[1]
with zipfile.ZipFile(src) as z, zipfile.ZipFile(src + ".new", "w", zipfile.ZIP_DEFLATED) as out:
    for m in z.infolist():
        if not m.filename.startswith(drop):
            out.writestr(m, z.read(m))
os.replace(src + ".new", src)
PY

# Stock 0.32-0.34 samples top-k/top-p with FlashInfer, which would compile its
# sampling module with nvcc on a fresh machine's first top-k/top-p request
# (minutes, docs/gpu-staging.md). Build it here from the wheel being sent;
# the device step puts it where FlashInfer loads prebuilt modules. Its cuRAND
# headers come from the nvidia-curand wheel torch pins, in the version the
# machine has (so it is not sent): this machine's Python may have no `nvidia`
# package at all. A build that fails stops the staging rather than sending
# chunks without it. STAGE_FLASHINFER_AOT=0 skips it.
packed=(wheels)
if [ "$flashinfer_aot" = 1 ]; then
  curand=$(grep -i '^nvidia-curand==' "$work/resolved.txt") \
    || { echo "[stage] STOP: the resolution names no nvidia-curand, whose headers FlashInfer's sampling module needs" >&2; exit 1; }
  echo "[stage] building FlashInfer's sampling module for sm_90a with $curand's headers (a minute or more on 2 cores)"
  python3 "$here/build_flashinfer_sampling.py" "$work/wheels" "$work/aot" "$curand" \
    || { echo "[stage] STOP: FlashInfer's sampling module did not build (above); STAGE_FLASHINFER_AOT=0 stages without it" >&2; exit 1; }
  packed+=(aot)
fi

echo "[stage] packing into ${chunk_mb} MB chunks"
rm -rf "$dest" && mkdir -p "$dest/tools"
# Wheels are already deflated, so xz gains little over them (200 MB of the
# torch wheel: 1.6% at level 0 in 11 s, 2.9% at level 6 in 50 s on two
# cores, where level 6 took half an hour over a whole 0.33 staging); it
# still packs the step in one stream that the device unpacks only once all
# parts are in.
tar cf - -C "$work" "${packed[@]}" | xz -${XZ_LEVEL:-0} -T0 | split -b "${chunk_mb}000000" -d -a 2 - "$dest/part_"
n=$(ls "$dest"/part_* | wc -l)
for p in "$dest"/part_*; do mkdir "$dest/c_${p##*_}"; mv "$p" "$dest/c_${p##*_}/"; done
echo "$n" > "$dest/tools/count"
echo "$version" > "$dest/tools/version"
cp "$here/device-step-newer.sh" "$work/machine-expects.txt" "$dest/tools/"
du -sh "$dest"/c_* | tail -3; du -sh "$dest"
echo "[stage] done: $n chunks. Send them in order, back to back (docs/gpu-staging.md):"
for c in "$dest"/c_*; do echo "  carry [.device/$tag/tools, .device/$tag/${c##*/}]  command: bash .device/$tag/tools/device-step-newer.sh"; done
echo "  (the last one as: bash .device/$tag/tools/device-step-newer.sh --last && <your work>)"
