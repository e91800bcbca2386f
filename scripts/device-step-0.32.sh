#!/usr/bin/env bash
# Runs on the GPU machine from the project root, once per call of the 0.32
# staging sequence (docs/gpu-staging.md). Keeps the chunk carried with this
# call in /tmp/vllm032-chunks; once all are there, unpacks the wheels and
# installs them into /tmp/vllm-site, then installs the project itself there
# (non-editable, so its entry points are registered). /tmp lasts only while
# the machine is held: the calls must follow each other within its 30 s of
# warmth, or start again from the first chunk.
set -euo pipefail
site=/tmp/vllm-site
have=/tmp/vllm032-chunks
want=$(cat .device/v032/tools/count)
mkdir -p "$have"
for p in .device/v032/c_*/part_*; do
  [ -e "$p" ] && [ ! -e "$have/${p##*/}" ] && cp "$p" "$have/"
done
if [ ! -e "$site/.ready-0.32" ]; then
  n=$(ls "$have" | wc -l)
  if [ "$n" -lt "$want" ]; then echo "[device-step-0.32] have $n of $want chunks; carry the next one"; exit 0; fi
  echo "[device-step-0.32] unpacking and installing"
  rm -rf /tmp/vllm032-bundle "$site" && mkdir -p /tmp/vllm032-bundle
  cat "$have"/part_* | xz -d | tar xf - -C /tmp/vllm032-bundle
  # The chunks are no longer needed; /tmp shares the disk with the install.
  rm -rf "$have"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" /tmp/vllm032-bundle/wheels/*.whl
  rm -rf /tmp/vllm032-bundle
  touch "$site/.ready-0.32"
fi
if [ -f pyproject.toml ]; then
  PYTHONPATH="$site" python3 -m pip install -q --no-index --no-deps --no-build-isolation --upgrade --target "$site" . >/tmp/project-install.log 2>&1 \
    && echo "[device-step-0.32] project installed into $site" || { echo "[device-step-0.32] project install failed:"; tail -20 /tmp/project-install.log; }
fi
echo "[device-step-0.32] ready: export PYTHONPATH=$site  ($(PYTHONPATH=$site python3 -c 'import vllm, torch, triton; print("vllm", vllm.__version__, "torch", torch.__version__, "triton", triton.__version__, "cuda", torch.cuda.is_available())' 2>&1 | tail -1))"
