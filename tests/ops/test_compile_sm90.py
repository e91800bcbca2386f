"""Every launched Triton kernel of ``ops/`` compiles for an H100 (sm_90).

The other CPU tests run the kernels through Triton's interpreter, which lets
through code that the GPU compiler rejects (a module global that is not a
``tl.constexpr`` is the classic one). Here Triton compiles each kernel ahead
of time with its bundled ptxas, with the exact arguments and constexprs its
launcher passes, in a set of constexpr variants that covers every value and
every pair of values the launchers expose, with all options off and all on
(see ``compile_sm90._variants``). No GPU is needed.

The compilation runs in one subprocess without ``TRITON_INTERPRET``
(tests/conftest.py sets it where there is no GPU, and kernels decorated under
it cannot be compiled) and with a fresh Triton cache, so every kernel really
compiles. It takes about three minutes on one core.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import missing_tool
from tests.ops import compile_sm90

REPO_ROOT = Path(__file__).resolve().parents[2]
# Variables that would make the subprocess interpret kernels, or accept the
# very globals this test exists to catch.
_STRIPPED_ENV = ("TRITON_INTERPRET", "TRITON_ALLOW_NON_CONSTEXPR_GLOBALS")
# Shared memory one block may use on an H100 (cudaDevAttrMaxSharedMemoryPerBlockOptin).
# Triton checks it only when it loads a kernel onto a GPU, so it is checked here.
H100_MAX_SHARED_BYTES = 232448
_KERNEL_CASES = [name for name in compile_sm90.CASES if name != compile_sm90.SELF_CHECK]


@pytest.fixture(scope="module")
def sm90_build(tmp_path_factory) -> dict:
    """Results of compiling every case once, as ``compile_sm90.main`` writes them."""
    tmp = tmp_path_factory.mktemp("sm90")
    env = {k: v for k, v in os.environ.items() if k not in _STRIPPED_ENV}
    env["TRITON_CACHE_DIR"] = str(tmp / "triton-cache")
    result_path = tmp / "result.json"
    proc = subprocess.run(
        [sys.executable, "-m", "tests.ops.compile_sm90", str(result_path)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if proc.returncode != 0:
        pytest.fail(
            f"compile_sm90 exited with {proc.returncode}:\n{proc.stdout[-2000:]}\n"
            f"{proc.stderr[-6000:]}"
        )
    result = json.loads(result_path.read_text())
    if "skip" in result:
        missing_tool(result["skip"])
    return result


@pytest.mark.parametrize("case", _KERNEL_CASES)
def test_kernels_compile_for_sm90(sm90_build, case):
    outcome = sm90_build["cases"][case]
    assert outcome["error"] is None, f"{case} does not compile for sm_90:\n{outcome['error']}"
    assert outcome["compiled"], f"{case} launched no kernel"
    for kernel in outcome["compiled"]:
        assert kernel["target"] == "cuda:90", kernel
        assert kernel["cubin_bytes"] > 0, f"{kernel['kernel']} produced no cubin"
        assert kernel["shared"] <= H100_MAX_SHARED_BYTES, (
            f"{kernel['kernel']} needs {kernel['shared']} bytes of shared memory"
        )


def test_every_launched_kernel_is_compiled(sm90_build):
    # Both ways: a kernel added to ops/ without a case fails, and so does a
    # launch the source scan no longer recognises.
    in_ops = set(sm90_build["launched"])
    in_cases = {
        kernel for case in _KERNEL_CASES for kernel in sm90_build["cases"][case]["launched"]
    }
    assert not in_ops - in_cases, (
        f"launched in ops/ but by no case of compile_sm90.py: {sorted(in_ops - in_cases)}"
    )
    assert not in_cases - in_ops, (
        f"launched by a case but not found in ops/ by the scan: {sorted(in_cases - in_ops)}"
    )


def test_harness_rejects_non_constexpr_global(sm90_build):
    # The interpreter reads a plain module global; the compiler must refuse
    # it, or the cases above would prove nothing about such globals.
    error = sm90_build["cases"][compile_sm90.SELF_CHECK]["error"]
    assert error is not None and "Cannot access global variable _PLAIN_GLOBAL" in error
