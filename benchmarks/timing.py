"""How the benchmarks measure: ``triton.testing.do_bench`` medians, CUDA-graph
replay, per-kernel profiler times, host wall time, and the device-to-device
copy bandwidth that every rate is a share of.

Nothing here runs at import; every function but ``one_call_us`` and
``pct_of_copy_bandwidth`` needs a CUDA GPU.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch
import triton

# do_bench's own default measuring time; tuning sweeps pass less.
DEFAULT_REP_MS = 100
DEFAULT_WARMUP_MS = 25


def copy_bandwidth_gbps() -> float:
    """Device-to-device copy bandwidth of the current GPU in GB/s.

    Copies 1 GiB of int32 and counts the bytes read plus the bytes written,
    so it is the rate a kernel that streams its input once could approach.
    """
    src = torch.empty(256 * 2**20, dtype=torch.int32, device="cuda")
    dst = torch.empty_like(src)
    ms = triton.testing.do_bench(lambda: dst.copy_(src), return_mode="median")
    return 2 * src.numel() * src.element_size() / (ms * 1e-3) / 1e9


def median_us(
    fn: Callable[[], object], rep_ms: int = DEFAULT_REP_MS, warmup_ms: int = DEFAULT_WARMUP_MS
) -> float:
    """Median GPU time of ``fn()`` in microseconds (``triton.testing.do_bench``,
    L2 flushed before every call, for about ``rep_ms`` milliseconds after
    ``warmup_ms`` of untimed calls)."""
    return triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median") * 1e3


def graph_replay_us(fn: Callable[[], object]) -> float:
    """Median of ``fn`` replayed from a CUDA graph: the device time alone,
    without the host's Python and launch time, which bounds small batches on
    a slow host (do_bench then times the host)."""
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return median_us(graph.replay)


def kernel_times_us(fn: Callable[[], object], reps: int = 20) -> dict[str, float]:
    """Mean device time of each kernel ``fn`` launches, from torch.profiler,
    keyed by the kernel's name cut to 40 characters."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    return {
        event.key[:40]: event.device_time_total / reps
        for event in prof.key_averages()
        if event.device_time_total > 0
    }


def host_median_us(fn: Callable[[], object], max_reps: int = 20, budget_s: float = 2.0) -> float:
    """Median wall time of ``fn`` in microseconds, for work that runs on the
    host: one warm-up call, then at least 3 and at most ``max_reps`` calls,
    stopping once ``budget_s`` seconds have passed."""
    fn()
    samples = []
    start = time.perf_counter()
    while len(samples) < max_reps and (len(samples) < 3 or time.perf_counter() - start < budget_s):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples) * 1e6


def one_call_us(fn: Callable[[], object]) -> float:
    """Wall time of one call of ``fn`` in microseconds (on the CPU, through
    Triton's interpreter: the interpreter's time, not a speed)."""
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e6


def pct_of_copy_bandwidth(bytes_read: int, us: float, bandwidth_gbps: float) -> float:
    """``bytes_read`` per ``us`` microseconds as a percentage of ``bandwidth_gbps``.

    Example: 1 GB read in 1000 us on a 2000 GB/s copy is 50 (%).
    """
    return 100 * bytes_read / (us * 1e-6) / 1e9 / bandwidth_gbps
