"""ops/compile_ahead.py on the CPU: every Triton launch inside becomes a
compile-only ``warmup`` (Triton's own ``run`` is swapped for the call only),
and under the interpreter nothing is launched twice. The speed-up itself
needs a GPU (``scripts/compile_ahead_check.py``)."""

import pytest

from tests.integration.helpers import run_python
from vllm_sampling_plugin.ops import compile_ahead as ahead


def test_launches_inside_compile_only_and_triton_is_restored_after(tmp_path):
    if not ahead.supported():
        pytest.skip("this Triton has no asynchronous compile mode")
    # Triton reads a kernel's source from its file.
    (tmp_path / "one_kernel.py").write_text(
        "import triton\n"
        "import triton.language as tl\n\n\n"
        "@triton.jit\n"
        "def kernel(x_ptr, N: tl.constexpr):\n"
        "    pass\n"
    )
    out = run_python(
        f"""
        import sys
        sys.path.insert(0, {str(tmp_path)!r})
        import triton.runtime.jit as jit
        from one_kernel import kernel
        from vllm_sampling_plugin.ops.compile_ahead import compile_ahead

        seen = []

        def recording_run(self, *args, grid, warmup, **kwargs):
            seen.append((self.fn.__name__, warmup, kwargs["N"]))

        jit.JITFunction.run = recording_run

        def launches():
            kernel[(1,)](None, N=4)
            kernel[(2,)](None, N=8)

        assert compile_ahead(launches, max_workers=2) == 0  # the recorder compiled nothing
        assert seen == [("kernel", True, 4), ("kernel", True, 8)], seen
        assert jit.JITFunction.run is recording_run
        kernel[(1,)](None, N=4)
        assert seen[-1] == ("kernel", False, 4)
        print("ok")
        """,
        env={"TRITON_INTERPRET": None},
    )
    assert out.strip().splitlines()[-1] == "ok"


def test_the_interpreter_compiles_nothing_so_nothing_is_launched(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    called = []
    assert ahead.compile_ahead(lambda: called.append(1)) == 0
    assert called == []


def test_inside_a_callers_asynchronous_mode_nothing_is_launched(monkeypatch):
    if not ahead.supported():
        pytest.skip("this Triton has no asynchronous compile mode")
    from concurrent.futures import ThreadPoolExecutor

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    called = []
    with ThreadPoolExecutor(1) as executor, ahead.AsyncCompileMode(executor):
        assert ahead.compile_ahead(lambda: called.append(1)) == 0
    assert called == []
