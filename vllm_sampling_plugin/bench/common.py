"""What the benchmark modules share: timing, the copy-bandwidth yardstick,
candidate columns, table cells, latency plots and the JSON report.

Every benchmark reports median microseconds (``triton.testing.do_bench``) and,
where it reads a known number of bytes, that rate as a share of a
device-to-device copy measured in the same run. A *row* is one benchmark
point, a flat dict that goes into the JSON ``results`` list as is; a column
``name`` stores ``<name>_us`` and ``<name>_pct_copy_bw``, or ``<name>_error``
when timing it failed.

Importing this module needs neither a GPU nor matplotlib.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any

import torch
import triton

# Error texts are cut so one failing column cannot flood the report.
ERROR_CHARS = 300


def start_run(benchmark: str, out_dir: str) -> tuple[str, float]:
    """Check for CUDA, create ``out_dir`` and measure the yardstick.

    Args:
        benchmark: name used in the error message, e.g. ``"sampler"``.
        out_dir: the ``--out`` directory; created if missing.

    Returns:
        ``(gpu_name, copy_bandwidth_gbps)``.

    Raises:
        SystemExit: ``"the <benchmark> benchmark needs a CUDA GPU"`` without CUDA.

    Example::

        gpu, bandwidth = start_run("sampler", args.out)
    """
    if not torch.cuda.is_available():
        raise SystemExit(f"the {benchmark} benchmark needs a CUDA GPU")
    os.makedirs(out_dir, exist_ok=True)
    return torch.cuda.get_device_name(), copy_bandwidth_gbps()


def copy_bandwidth_gbps() -> float:
    """Device-to-device copy bandwidth of the current GPU in GB/s.

    Copies 1 GiB of int32 and counts the bytes read plus the bytes written,
    so it is the rate a kernel that streams its input once could approach.
    """
    src = torch.empty(256 * 2**20, dtype=torch.int32, device="cuda")
    dst = torch.empty_like(src)
    ms = triton.testing.do_bench(lambda: dst.copy_(src), return_mode="median")
    return 2 * src.numel() * src.element_size() / (ms * 1e-3) / 1e9


def median_us(fn: Callable[[], object], rep_ms: int = 100) -> float:
    """Median GPU time of ``fn()`` in microseconds (``triton.testing.do_bench``,
    L2 flushed before every call, for about ``rep_ms`` milliseconds; 100 is
    do_bench's own default, a tuning sweep passes less)."""
    return triton.testing.do_bench(fn, rep=rep_ms, return_mode="median") * 1e3


def pct_of_copy_bandwidth(bytes_read: int, us: float, bandwidth_gbps: float) -> float:
    """``bytes_read`` per ``us`` microseconds as a percentage of ``bandwidth_gbps``.

    Example: 1 GB read in 1000 us on a 2000 GB/s copy is 50 (%).
    """
    return 100 * bytes_read / (us * 1e-6) / 1e9 / bandwidth_gbps


def build_columns(
    candidates: dict[str, Callable[[Any], Callable[[], object]]],
    names: Iterable[str],
    case: Any,
    notes: dict[str, str],
) -> dict[str, Callable[[], object]]:
    """Turn ``case`` into the zero-argument call of each named candidate.

    A factory that raises (an optional library missing, say) marks its column
    unavailable: ``notes[name]`` gets ``"unavailable: <error>"`` and the column
    is skipped for every later case too, so each gets one note.

    Returns:
        ``{name: call}`` for the available columns, in ``names`` order.
    """
    calls = {}
    for name in names:
        if name in notes:
            continue
        try:
            calls[name] = candidates[name](case)
        except Exception as exc:  # noqa: BLE001 (an optional library missing: one note per column)
            notes[name] = f"unavailable: {type(exc).__name__}: {exc}"[:ERROR_CHARS]
    return calls


def record_timing(
    row: dict,
    name: str,
    call: Callable[[], object],
    *,
    bytes_read: int | None = None,
    bandwidth_gbps: float | None = None,
    rep_ms: int = 100,
    error_chars: int = ERROR_CHARS,
) -> None:
    """Time ``call`` with ``median_us`` into ``row[f"{name}_us"]``.

    With ``bytes_read`` (and ``bandwidth_gbps``) also stores
    ``row[f"{name}_pct_copy_bw"]``. An exception (an OOM, a kernel or compile
    failure) must not end the run: it is stored as ``row[f"{name}_error"]``,
    cut to ``error_chars`` characters, instead.

    Example::

        for name, call in build_columns(CANDIDATES, names, case, notes).items():
            record_timing(row, name, call, bytes_read=nbytes, bandwidth_gbps=bw)
    """
    try:
        us = median_us(call, rep_ms)
    except Exception as exc:  # noqa: BLE001 (an OOM or a kernel failure must not end the run)
        row[f"{name}_error"] = f"{type(exc).__name__}: {exc}"[:error_chars]
        return
    row[f"{name}_us"] = us
    if bytes_read is not None:
        row[f"{name}_pct_copy_bw"] = pct_of_copy_bandwidth(bytes_read, us, bandwidth_gbps)


def timed_columns(results: list[dict], names: Iterable[str]) -> list[str]:
    """The names, in order, that have a time in at least one row."""
    return [n for n in names if any(f"{n}_us" in r for r in results)]


def timing_cell(row: dict, name: str, width: int) -> str:
    """``"<us>us (<pct>%)"`` right-aligned in ``width`` characters, or ``"-"``."""
    if f"{name}_us" not in row:
        return f"{'-':>{width}}"
    return f"{row[f'{name}_us']:>{width - 10}.1f}us ({row[f'{name}_pct_copy_bw']:>4.0f}%)"


def fastest_per_case(times: dict[Hashable, list[float]]) -> list[float]:
    """For ``times = {setting: [us per case]}``, the lowest time of each case."""
    return [min(case) for case in zip(*times.values())]


def slowdown_scores(times: dict[Hashable, list[float]]) -> dict[Hashable, float]:
    """Per setting, the geometric mean over the cases of time / fastest time
    (1.0 = fastest everywhere): how a tuning sweep ranks its settings."""
    fastest = fastest_per_case(times)
    return {
        setting: math.exp(sum(math.log(t / f) for t, f in zip(us, fastest)) / len(fastest))
        for setting, us in times.items()
    }


def tuning_by_precision(tuning: dict[bool, Any]) -> dict[str, dict]:
    """A kernel's ``TUNING`` table (dataclasses keyed by ``use_fp64``) as JSON:
    ``{"fp32": {...}, "fp64": {...}}``."""
    return {
        "fp32": dataclasses.asdict(tuning[False]),
        "fp64": dataclasses.asdict(tuning[True]),
    }


def plot_latency(
    results: list[dict],
    names: Sequence[str],
    path: str,
    *,
    title: str,
    x: str,
    xlabel: str,
    panel_title: str,
    columns: str,
    rows: str | None = None,
    panel_size: tuple[float, float] = (5, 4),
) -> bool:
    """Log-log latency plot: one panel per value of ``results[i][columns]``
    (and per value of ``rows``, a grid, when given), one line per name
    (``<name>_us`` against ``results[i][x]``), saved as a PNG at ``path``.

    ``panel_title`` is formatted with the panel's first result, e.g.
    ``"K={K}, V={V}"``. Returns False, drawing nothing, when matplotlib is not
    importable.

    Example::

        plot_latency(results, ["plugin_fp32"], "out/sampler.png", title="latency",
                     x="B", xlabel="batch B", panel_title="V={V}", columns="V")
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    column_values = sorted({r[columns] for r in results})
    row_values = sorted({r[rows] for r in results}) if rows is not None else [None]
    width, height = panel_size
    fig, axes = plt.subplots(
        len(row_values),
        len(column_values),
        figsize=(width * len(column_values), height * len(row_values)),
        squeeze=False,
    )
    for i, row_value in enumerate(row_values):
        for j, column_value in enumerate(column_values):
            panel = sorted(
                (
                    r
                    for r in results
                    if r[columns] == column_value and (rows is None or r[rows] == row_value)
                ),
                key=lambda r: r[x],
            )
            if not panel:
                continue
            ax = axes[i][j]
            for name in names:
                points = [(r[x], r[f"{name}_us"]) for r in panel if f"{name}_us" in r]
                if points:
                    ax.plot(*zip(*points), marker="o", label=name)
            ax.set(
                xscale="log",
                yscale="log",
                xlabel=xlabel,
                ylabel="us",
                title=panel_title.format(**panel[0]),
            )
            ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return True


def host_copy(output: object) -> object:
    """A candidate's output (a tensor, or a tuple of them) copied to the host."""
    if isinstance(output, torch.Tensor):
        return output.cpu()
    if isinstance(output, (tuple, list)):
        return tuple(host_copy(o) for o in output)
    return output


def dump_tokens(path: str, tokens: dict[str, dict[str, object]]) -> None:
    """``tokens = {case label: {column: host_copy(output)}}`` saved with
    ``torch.save`` at ``path`` (``--dump-tokens``), so that the tokens of two
    versions of the code on the same inputs can be compared
    (``scripts/bench_compare.py``)."""
    torch.save(tokens, path)
    print(f"wrote the tokens of {len(tokens)} cases to {path}")


def write_json(out_dir: str, filename: str, report: dict) -> None:
    """``report`` as indented JSON at ``out_dir/filename``."""
    with open(os.path.join(out_dir, filename), "w") as f:
        json.dump(report, f, indent=2)


def write_results(out_dir: str, stem: str, report: dict, plot: Callable[[str], bool]) -> None:
    """Write ``<stem>.json``, then ``plot(<out_dir>/<stem>.png)``, and say what was written."""
    write_json(out_dir, f"{stem}.json", report)
    if plot(os.path.join(out_dir, f"{stem}.png")):
        print(f"wrote {out_dir}/{stem}.json and {stem}.png")
    else:
        print(f"wrote {out_dir}/{stem}.json (no matplotlib: no plot)")
