"""Build FlashInfer's sampling module for sm_90a here, without a GPU, from
the FlashInfer wheel a staging sends (scripts/stage-vllm-newer.sh).

Stock vLLM 0.32/0.33 samples top-k/top-p with FlashInfer, which otherwise
compiles this module with nvcc on a fresh GPU machine's first top-k/top-p
request (minutes; docs/gpu-staging.md). FlashInfer loads a module found at
``flashinfer/data/aot/<name>/<name>.so`` instead of building it, so the
device step copies the result there.

    python3 scripts/build_flashinfer_sampling.py WHEELS_DIR OUT_DIR nvidia-curand==VERSION

writes ``OUT_DIR/sampling/sampling.so``. Needs nvcc (CUDA 13, under
CUDA_HOME or /usr/local/cuda), gcc, and a torch for FlashInfer's import. The
cuRAND headers (curand_kernel.h, which a CUDA toolkit of nvcc alone lacks)
come from the nvidia-curand wheel named, installed beside FlashInfer for the
build: this Python's own ``nvidia`` packages, where it has any, are not read
(a fresh machine had none: ``No module named 'nvidia'``).
"""

import glob
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The H100 and H200 the device tool lends; FlashInfer's JIT there builds for 9.0a.
CUDA_ARCH = "9.0a"


def cuda_include_dirs(site: Path) -> list[str]:
    """Header folders of the NVIDIA wheels installed into ``site`` that hold
    cuRAND's; stops, naming what is missing, where there is none."""
    found = sorted({str(Path(h).parent) for h in glob.glob(f"{site}/nvidia/*/include/curand.h")})
    if not found:
        sys.exit(f"[stage] no curand.h under {site}/nvidia/*/include: FlashInfer's sampling "
                 f"module includes curand_kernel.h; name the nvidia-curand wheel to build with")
    return found


def cuda_home() -> str:
    """CUDA_HOME, else /usr/local/cuda: FlashInfer would otherwise take the
    folder above ``which nvcc``, which a wrapper in /usr/local/bin makes
    /usr/local (no CUDA libraries there)."""
    return os.environ.get("CUDA_HOME", "/usr/local/cuda")


def libcuda_stub(folder: Path) -> Path:
    """An empty ``libcuda.so`` (soname libcuda.so.1) for the link's ``-lcuda``
    on a machine without a driver: the module keeps no symbol of it (the
    linker drops it as not needed) and the GPU machine has the real one."""
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(["gcc", "-shared", "-Wl,-soname,libcuda.so.1", "-o",
                    str(folder / "libcuda.so"), "-x", "c", "-"], input=b"", check=True)
    return folder


def tvm_ffi_requirement(wheels: Path) -> str:
    """The apache-tvm-ffi version sent with FlashInfer, for this Python (the
    wheel sent is the GPU machine's cp312 one)."""
    sent = next(wheels.glob("apache_tvm_ffi-*.whl"))
    return f"apache-tvm-ffi=={sent.name.split('-')[1]}"


def main(wheels_dir: str, out_dir: str, curand_requirement: str) -> int:
    wheels = Path(wheels_dir)
    flashinfer_wheel = next(wheels.glob("flashinfer_python-*.whl"))
    with tempfile.TemporaryDirectory() as tmp:
        site = Path(tmp) / "site"
        installed = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                                    "--target", str(site), str(flashinfer_wheel),
                                    tvm_ffi_requirement(wheels), curand_requirement])
        if installed.returncode != 0:
            sys.exit(f"[stage] could not install what FlashInfer's sampling module is built "
                     f"from ({flashinfer_wheel.name}, {tvm_ffi_requirement(wheels)}, "
                     f"{curand_requirement}); pip's output is above")
        # FLASHINFER_DISABLE_VERSION_CHECK: a flashinfer-cubin of another
        # version installed on this machine stops the import otherwise; the
        # JIT build reads no cubin.
        env = {**os.environ, "PYTHONPATH": str(site), "FLASHINFER_CUDA_ARCH_LIST": CUDA_ARCH,
               "FLASHINFER_DISABLE_VERSION_CHECK": "1",
               "FLASHINFER_WORKSPACE_BASE": tmp, "MAX_JOBS": str(os.cpu_count() or 1),
               "CUDA_HOME": cuda_home(),
               "CPATH": os.pathsep.join(cuda_include_dirs(site) + [os.environ.get("CPATH", "")]),
               "LIBRARY_PATH": os.pathsep.join([str(libcuda_stub(Path(tmp) / "stubs")),
                                                os.environ.get("LIBRARY_PATH", "")])}
        build = ("from flashinfer.jit.sampling import gen_sampling_module\n"
                 "spec = gen_sampling_module()\n"
                 "spec.build()\n"
                 "print(spec.jit_library_path)\n")
        start = time.monotonic()
        result = subprocess.run([sys.executable, "-c", build], env=env,
                                capture_output=True, text=True)
        if result.returncode != 0:
            sys.exit(f"[stage] FlashInfer's sampling module did not build (exit "
                     f"{result.returncode}). Its last output:\n{result.stderr[-3000:]}")
        built = result.stdout.strip().splitlines()[-1]
        target = Path(out_dir) / "sampling" / "sampling.so"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(Path(built).read_bytes())
    print(f"[stage] FlashInfer sampling module for sm_{CUDA_ARCH.replace('.', '')} built in "
          f"{time.monotonic() - start:.0f} s: {target} ({target.stat().st_size / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    sys.exit(main(*sys.argv[1:]))
