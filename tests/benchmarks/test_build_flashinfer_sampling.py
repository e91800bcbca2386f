"""scripts/build_flashinfer_sampling.py: the pieces that need no nvcc."""

import shutil
import sys
import types
from pathlib import Path

import pytest

from tests.scripts_dir import load_script

build = load_script("build_flashinfer_sampling")


def test_tvm_ffi_is_asked_for_in_the_version_the_staging_sends(tmp_path):
    (tmp_path / "flashinfer_python-0.7.2.post1-py3-none-any.whl").touch()
    (tmp_path / "apache_tvm_ffi-0.1.11-cp312-abi3-manylinux2014_x86_64.whl").touch()
    assert build.tvm_ffi_requirement(tmp_path) == "apache-tvm-ffi==0.1.11"


def test_cuda_include_dirs_are_the_build_sites_nvidia_folders_that_hold_curand(tmp_path, monkeypatch):
    """Read from the site the build installs the named nvidia-curand into,
    even where this Python has no ``nvidia`` package (a fresh machine: the
    build stopped with ``No module named 'nvidia'``)."""
    for wheel, header in (("cu13", "curand.h"), ("cudnn", "cudnn.h")):
        (tmp_path / "nvidia" / wheel / "include").mkdir(parents=True)
        (tmp_path / "nvidia" / wheel / "include" / header).touch()
    monkeypatch.setitem(sys.modules, "nvidia", None)  # import nvidia raises
    assert build.cuda_include_dirs(tmp_path) == [str(tmp_path / "nvidia" / "cu13" / "include")]


def test_a_site_without_curand_stops_the_build_naming_the_wheel(tmp_path):
    (tmp_path / "nvidia" / "cudnn" / "include").mkdir(parents=True)
    (tmp_path / "nvidia" / "cudnn" / "include" / "cudnn.h").touch()
    with pytest.raises(SystemExit) as stopped:
        build.cuda_include_dirs(tmp_path)
    assert "no curand.h" in str(stopped.value) and "nvidia-curand" in str(stopped.value)


@pytest.mark.skipif(shutil.which("gcc") is None, reason="no gcc")
def test_the_libcuda_stub_is_a_shared_library_named_for_the_driver(tmp_path):
    stub = (build.libcuda_stub(tmp_path / "stubs") / "libcuda.so").read_bytes()
    assert stub.startswith(b"\x7fELF") and b"libcuda.so.1" in stub


def test_cuda_home_is_the_toolkit_not_the_folder_above_a_wrapper(monkeypatch):
    monkeypatch.delenv("CUDA_HOME", raising=False)
    assert build.cuda_home() == "/usr/local/cuda"
    monkeypatch.setenv("CUDA_HOME", "/opt/cuda-13.0")
    assert build.cuda_home() == "/opt/cuda-13.0"


def test_a_failed_build_says_why_and_the_build_ignores_another_cubin_version(tmp_path, monkeypatch):
    """The build's own error reaches the staging log (it was swallowed, and a
    flashinfer-cubin of another version on this machine stopped the import)."""
    (tmp_path / "flashinfer_python-0.7.0.post1-py3-none-any.whl").touch()
    (tmp_path / "apache_tvm_ffi-0.1.15-cp312-abi3-manylinux2014_x86_64.whl").touch()
    builds, installs = [], []

    def run(cmd, env=None, **kwargs):
        if cmd[1] == "-c":
            builds.append(env)
            return types.SimpleNamespace(returncode=1, stdout="", stderr="nvcc fatal: no sm_90a")
        installs.append(cmd)
        return types.SimpleNamespace(returncode=0)

    monkeypatch.setattr(build.subprocess, "run", run)
    monkeypatch.setattr(build, "libcuda_stub", lambda folder: folder)
    monkeypatch.setattr(build, "cuda_include_dirs", lambda site: ["/curand/include"])
    with pytest.raises(SystemExit) as failed:
        build.main(str(tmp_path), str(tmp_path / "aot"), "nvidia-curand==10.4.0.35")
    assert "did not build (exit 1)" in str(failed.value)
    assert str(failed.value).endswith("nvcc fatal: no sm_90a")
    assert builds[0]["FLASHINFER_DISABLE_VERSION_CHECK"] == "1"
    assert builds[0]["CPATH"].split(":")[0] == "/curand/include"
    assert "nvidia-curand==10.4.0.35" in installs[0]
    assert not (tmp_path / "aot").exists()


def test_wheels_that_do_not_install_stop_the_build_before_it_starts(tmp_path, monkeypatch):
    (tmp_path / "flashinfer_python-0.7.4-py3-none-any.whl").touch()
    (tmp_path / "apache_tvm_ffi-0.1.11-cp312-abi3-manylinux2014_x86_64.whl").touch()
    calls = []

    def run(cmd, **kwargs):
        calls.append(cmd)
        return types.SimpleNamespace(returncode=1)

    monkeypatch.setattr(build.subprocess, "run", run)
    with pytest.raises(SystemExit) as stopped:
        build.main(str(tmp_path), str(tmp_path / "aot"), "nvidia-curand==10.4.0.35")
    assert "could not install" in str(stopped.value) and "nvidia-curand==10.4.0.35" in str(stopped.value)
    assert len(calls) == 1
