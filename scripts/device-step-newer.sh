#!/usr/bin/env bash
# Runs on the GPU machine from the project root, once per call of a newer
# line's staging sequence (scripts/stage-vllm-newer.sh, docs/gpu-staging.md),
# as `bash .device/v0NN/tools/device-step-newer.sh`. Keeps the chunk carried
# with this call in /tmp/vllm-v0NN-chunks; once all are there, unpacks the wheels and
# installs them into /tmp/vllm-site, then installs the project itself there
# (non-editable, so its entry points are registered). /tmp lasts only while
# the machine is held: the calls must follow each other within its 30 s of
# warmth, or start again from the first chunk. The call that chains the work
# passes --last (`bash .../device-step-newer.sh --last && ...`): where chunks
# are still missing there (the machine went cold between calls and this is a
# fresh one), it exits 4, so the work after `&&` never runs without vLLM.
set -euo pipefail
last_call=0
[ "${1:-}" = --last ] && last_call=1
stage=$(dirname "$(dirname "$0")")        # .device/v033
tag=$(basename "$stage")
version=$(cat "$stage/tools/version")
me="[device-step $version]"
site=/tmp/vllm-site
have=/tmp/vllm-$tag-chunks
want=$(cat "$stage/tools/count")
mkdir -p "$have"
# First call: the staging left some packages to the machine (its torch
# 2.11.0+cu130 set and the CUDA libraries in tools/machine-expects.txt); check
# that the machine has them before any more chunks are spent on it.
# Wheels in .device/v0NN/extra (carried with the first chunk) stand in for
# packages the machine turned out to lack: they are installed with the rest.
expects=$stage/tools/machine-expects.txt
extra=/tmp/vllm-$tag-extra
if [ -d "$stage/extra" ]; then mkdir -p "$extra" && cp "$stage"/extra/*.whl "$extra/"; fi
if [ -f "$expects" ] && [ ! -e "/tmp/vllm-$tag-machine-ok" ]; then
  if env -u PYTHONPATH python3 - "$expects" "$extra" <<'PY'
import os
import sys
from importlib.metadata import PackageNotFoundError, version
try:
    from packaging.requirements import Requirement
except ImportError:
    from pip._vendor.packaging.requirements import Requirement
def norm(name):
    return name.lower().replace("-", "_").replace(".", "_")
sent = {norm(f.split("-")[0]) for f in os.listdir(sys.argv[2])} if os.path.isdir(sys.argv[2]) else set()
bad = []
for line in open(sys.argv[1]):
    if not line.strip():
        continue
    r = Requirement(line.strip())
    if norm(r.name) in sent:
        continue
    try:
        v = version(r.name)
    except PackageNotFoundError:
        bad.append(f"{r.name}: not installed, staging expects {r.specifier}")
        continue
    if not r.specifier.contains(v, prereleases=True):
        bad.append(f"{r.name}: {v} installed, staging expects {r.specifier}")
for b in bad:
    print("  " + b)
sys.exit(1 if bad else 0)
PY
  then touch "/tmp/vllm-$tag-machine-ok"
  else
    echo "$me STOP: the machine lacks what the staging left to it (above); stage again with those sent (STAGE_SEND_CUDA_LIBS=1 for the CUDA libraries, or drop the entry from the list in scripts/stage-vllm-newer.sh)"
    exit 3
  fi
fi
for p in "$stage"/c_*/part_*; do
  [ -e "$p" ] && [ ! -e "$have/${p##*/}" ] && cp "$p" "$have/"
done
if [ ! -e "$site/.ready-$version" ]; then
  n=$(ls "$have" | wc -l)
  if [ "$n" -lt "$want" ]; then
    if [ "$last_call" = 1 ]; then
      echo "$me STOP: --last, but only $n of $want chunks are here (the machine was handed back between calls?); stage again from the first chunk"
      exit 4
    fi
    echo "$me have $n of $want chunks; carry the next one"
    exit 0
  fi
  echo "$me unpacking and installing"
  bundle=/tmp/vllm-$tag-bundle
  rm -rf "$bundle" "$site" && mkdir -p "$bundle"
  cat "$have"/part_* | xz -d | tar xf - -C "$bundle"
  # The chunks are no longer needed; /tmp shares the disk with the install.
  rm -rf "$have"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" "$bundle"/wheels/*.whl
  if ls "$extra"/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" "$extra"/*.whl
  fi
  # FlashInfer's sampling module, prebuilt by the staging: FlashInfer loads it
  # from its package's data/aot instead of compiling it on first use.
  if [ -e "$bundle/aot/sampling/sampling.so" ]; then
    mkdir -p "$site/flashinfer/data/aot/sampling"
    cp "$bundle/aot/sampling/sampling.so" "$site/flashinfer/data/aot/sampling/"
    echo "$me FlashInfer sampling module installed prebuilt"
  fi
  rm -rf "$bundle"
  touch "$site/.ready-$version"
fi
if [ -f pyproject.toml ]; then
  PYTHONPATH="$site" python3 -m pip install -q --no-index --no-deps --no-build-isolation --upgrade --target "$site" . >/tmp/project-install.log 2>&1 \
    && echo "$me project installed into $site" || { echo "$me project install failed:"; tail -20 /tmp/project-install.log; }
fi
# cuDNN may be the machine's 9.19 under torch 2.13/2.14 (built with 9.20/9.24): torch's
# Python-side minor-version check would raise on a cuDNN path (conv, RNN),
# which a dense model does not take; the variable makes it a warning.
env_line="PYTHONPATH=$site"
# The CuTe DSL (sent from 0.34) reaches sys.path through a .pth file, which
# PYTHONPATH does not read: its package folder is named instead.
[ -d "$site/nvidia_cutlass_dsl/dsl_packages" ] && env_line="$env_line:$site/nvidia_cutlass_dsl/dsl_packages"
grep -q '^nvidia-cudnn-cu13' "$expects" 2>/dev/null && env_line="$env_line PYTORCH_SKIP_CUDNN_COMPATIBILITY_CHECK=1"
# The work after `--last &&` reads the same line: `. /tmp/vllm-site/env.sh`.
echo "export $env_line" > "$site/env.sh"
echo "$me ready: export $env_line  ($(env $env_line python3 -c 'import vllm, torch, triton
x = torch.ones(256, 256, device="cuda", dtype=torch.bfloat16)
print("vllm", vllm.__version__, "torch", torch.__version__, "triton", triton.__version__, "cuda", torch.cuda.is_available(), "matmul", float((x @ x)[0, 0]), "cudnn", torch.backends.cudnn.version())' 2>&1 | tail -1))"
