"""Compile many Triton kernel variants at once, before launching them.

A start-up warm-up launches one batch of every kernel variant the engine can
use so that no request waits for a compile; launched one after another, the
variants compile one after another, and a compile is mostly LLVM and ptxas
work that holds no Python lock. :func:`compile_ahead` runs the warm-up's
launches once in a mode where every Triton launch only hands its compile to a
thread pool (Triton's ``AsyncCompileMode`` with the launch turned into a
``warmup``: nothing runs on the device, no output is written) and returns
when every compile has finished and sits in its kernel's in-memory cache.
The warm-up's real launches that follow then find every variant compiled.

Where the installed Triton lacks that mode (its module is private), where
kernels run in Triton's interpreter, or inside a caller's own asynchronous
mode (it does not nest), the call does nothing (``launches`` is not called)
and the real launches compile as before.

Compiled ahead, the 29 variants of an engine with the plugin's verification
at k = 7 took a third of the time they take one after another, with the
same tokens (``scripts/compile_ahead_check.py``; the run: docs/benchmarks.md).

Example::

    >>> compile_ahead(lambda: None)  # nothing to compile: 0 variants
    0
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import triton.runtime.jit as triton_jit

try:
    from triton.runtime._async_compile import AsyncCompileMode, active_mode
except ImportError:  # a Triton without asynchronous compiles
    AsyncCompileMode = active_mode = None


def supported() -> bool:
    """Whether the installed Triton can compile ahead: it has the
    asynchronous mode, and its launches take ``warmup``."""
    if AsyncCompileMode is None:
        return False
    return "warmup" in inspect.signature(triton_jit.JITFunction.run).parameters


def _interpreted() -> bool:
    """Kernels run in Triton's interpreter (``TRITON_INTERPRET=1``): nothing compiles."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def _compiling_only(run):
    """``JITFunction.run`` turned into its ``warmup`` (compile, do not launch)."""

    @functools.wraps(run)
    def compile_only(self, *args, **kwargs):
        kwargs["warmup"] = True
        return run(self, *args, **kwargs)

    return compile_only


def compile_ahead(launches: Callable[[], object], max_workers: int | None = None) -> int:
    """Compile every Triton kernel variant that ``launches()`` would launch,
    in parallel, without running any; returns how many distinct variants
    were compiled (0 where it does nothing: see the module doc).

    Args:
        launches: the launches to compile for. It is called once, on the
            calling thread, with every Triton launch inside returning at
            once (its outputs unwritten): it must not read back what its
            kernels would have written.
        max_workers: compile threads; default: the CPUs this process may use.

    Triton's ``JITFunction.run`` is swapped for the duration of the call
    only, so the engine's own launches afterwards pay nothing for it.
    """
    if _interpreted() or not supported() or active_mode.get() is not None:
        # (Triton's mode does not nest: inside a caller's, launch as usual.)
        return 0
    workers = max_workers or max(1, len(os.sched_getaffinity(0)))
    run = triton_jit.JITFunction.run
    triton_jit.JITFunction.run = _compiling_only(run)
    try:
        with ThreadPoolExecutor(workers) as executor, AsyncCompileMode(executor) as mode:
            launches()
            compiled = len(mode.future_kernels)
    finally:
        triton_jit.JITFunction.run = run
    return compiled
