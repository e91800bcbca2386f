"""scripts/build_flashinfer_sampling.py: the pieces that need no nvcc."""

import importlib.util
import shutil
from pathlib import Path

import pytest

from tests.scripts_dir import load_script

build = load_script("build_flashinfer_sampling")


def test_tvm_ffi_is_asked_for_in_the_version_the_staging_sends(tmp_path):
    (tmp_path / "flashinfer_python-0.7.2.post1-py3-none-any.whl").touch()
    (tmp_path / "apache_tvm_ffi-0.1.11-cp312-abi3-manylinux2014_x86_64.whl").touch()
    assert build.tvm_ffi_requirement(tmp_path) == "apache-tvm-ffi==0.1.11"


@pytest.mark.skipif(importlib.util.find_spec("nvidia") is None,
                    reason="no NVIDIA wheels beside this Python's torch")
def test_cuda_include_dirs_hold_curand():
    dirs = build.cuda_include_dirs()
    assert dirs and all((Path(d) / "curand.h").is_file() for d in dirs)


@pytest.mark.skipif(shutil.which("gcc") is None, reason="no gcc")
def test_the_libcuda_stub_is_a_shared_library_named_for_the_driver(tmp_path):
    stub = (build.libcuda_stub(tmp_path / "stubs") / "libcuda.so").read_bytes()
    assert stub.startswith(b"\x7fELF") and b"libcuda.so.1" in stub


def test_cuda_home_is_the_toolkit_not_the_folder_above_a_wrapper(monkeypatch):
    monkeypatch.delenv("CUDA_HOME", raising=False)
    assert build.cuda_home() == "/usr/local/cuda"
    monkeypatch.setenv("CUDA_HOME", "/opt/cuda-13.0")
    assert build.cuda_home() == "/opt/cuda-13.0"
