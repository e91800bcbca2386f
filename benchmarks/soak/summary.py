"""Counts, latencies, memory and throughput of a soak run, and its verdict."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class MemorySample:
    gpu_mib: float | None
    host_rss_mib: float | None


@dataclass
class SoakSummary:
    ok: int = 0
    rejected: int = 0  # expected 400s
    aborted: int = 0  # client disconnects, as planned
    truncated_structured: int = 0  # structured outputs cut by max_tokens
    # JSON strings whose maxLength was not judged (validate.length_unjudged)
    length_unjudged: int = 0
    tokens: int = 0
    latencies_s: list[float] = field(default_factory=list)
    # (request index, kind, problem), for anything not planned
    unexpected: list[tuple[int, str, str]] = field(default_factory=list)
    # (window start s, tokens finished in the window)
    windows: list[tuple[float, int]] = field(default_factory=list)
    memory_start: MemorySample | None = None
    memory_end: MemorySample | None = None


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile, ``q`` in [0, 100]; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]


def tokens_per_window(finish_times: list[tuple[float, int]], window_s: float) -> list[tuple[float, int]]:
    """(window start, tokens) for every window from 0 to the last finish."""
    if not finish_times:
        return []
    last = max(t for t, _ in finish_times)
    windows = [0] * (int(last // window_s) + 1)
    for t, tokens in finish_times:
        windows[int(t // window_s)] += tokens
    return [(i * window_s, tokens) for i, tokens in enumerate(windows)]


def memory_growth(summary: SoakSummary) -> dict[str, float]:
    """MiB gained from start to end, per memory that was sampled both times."""
    start, end = summary.memory_start, summary.memory_end
    if start is None or end is None:
        return {}
    growth = {}
    for name in ("gpu_mib", "host_rss_mib"):
        before, after = getattr(start, name), getattr(end, name)
        if before is not None and after is not None:
            growth[name] = after - before
    return growth


def verdict(summary: SoakSummary, max_gpu_growth_mib: float, max_host_growth_mib: float) -> list[str]:
    """Why the run failed; empty when it passed."""
    failures = [f"{len(summary.unexpected)} unexpected results"] if summary.unexpected else []
    limits = {"gpu_mib": max_gpu_growth_mib, "host_rss_mib": max_host_growth_mib}
    for name, grown in memory_growth(summary).items():
        if grown > limits[name]:
            failures.append(f"{name} grew {grown:.0f} MiB (limit {limits[name]:.0f})")
    if summary.ok == 0:
        failures.append("no request succeeded")
    return failures


def render(summary: SoakSummary, failures: list[str]) -> str:
    def mib(sample: MemorySample | None, name: str) -> str:
        value = None if sample is None else getattr(sample, name)
        return "n/a" if value is None else f"{value:.0f} MiB"

    p50, p99 = percentile(summary.latencies_s, 50), percentile(summary.latencies_s, 99)
    lines = [
        (f"requests ok {summary.ok} / rejected (expected 400) {summary.rejected} / "
         f"aborted {summary.aborted} / unexpected {len(summary.unexpected)}"),
        f"structured outputs cut by max_tokens (not judged): {summary.truncated_structured}",
        ("JSON strings with U+FFFD, maxLength not judged (byte tokens split a "
         f"character): {summary.length_unjudged}"),
        f"tokens {summary.tokens}",
        "latency p50 "
        + ("n/a" if p50 is None else f"{p50:.3f} s")
        + " / p99 "
        + ("n/a" if p99 is None else f"{p99:.3f} s"),
        (f"GPU memory start {mib(summary.memory_start, 'gpu_mib')} / "
         f"end {mib(summary.memory_end, 'gpu_mib')}"),
        (f"server host RSS start {mib(summary.memory_start, 'host_rss_mib')} / "
         f"end {mib(summary.memory_end, 'host_rss_mib')}"),
        "tokens per window: " + ", ".join(f"{start:.0f}s:{n}" for start, n in summary.windows),
    ]
    lines += [f"  unexpected #{i} [{kind}]: {problem}" for i, kind, problem in summary.unexpected[:20]]
    lines.append("PASS" if not failures else "FAIL: " + "; ".join(failures))
    return "\n".join(lines)
