"""What a benchmark run leaves behind: the JSON report, the latency PNG, the
console and Markdown tables, and the ``--dump-tokens`` file.

A report is ``{"benchmark", "gpu", "copy_bandwidth_gbps", ..., "notes",
"results"}``; every ``results`` row is a flat dict: the case's keys (``B``,
``V``, ...), ``<column>_us`` and ``<column>_pct_copy_bw`` per timed column
(``<column>_error`` when timing it failed), then the area's checks, ratios
and annotations. ``bench upstream``'s rows (``harness.measure_interleaved``)
carry per side ``<side>_us`` and the spread of its rounds, a ``ratio``, and a
``note``, ``error`` or ``skipped`` reason: ``paired_markdown_table``.
Importing this module needs neither a GPU nor matplotlib.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Plot:
    """A log-log latency figure: one panel per value of ``columns`` (and per
    value of ``rows``, a grid, when given), one line per candidate,
    ``<name>_us`` against ``x``. ``title`` is formatted with ``gpu`` and the
    command-line arguments, ``panel_title`` with the panel's first row."""

    title: str
    x: str
    xlabel: str
    panel_title: str
    columns: str
    rows: str | None = None
    panel_size: tuple[float, float] = (5, 4)


def plot_latency(
    results: list[dict], names: Sequence[str], path: str, plot: Plot, title: str
) -> bool:
    """Draw ``plot`` for ``results`` into the PNG at ``path``; returns False,
    drawing nothing, when matplotlib is not importable."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    column_values = sorted({r[plot.columns] for r in results})
    row_values = sorted({r[plot.rows] for r in results}) if plot.rows is not None else [None]
    width, height = plot.panel_size
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
                    if r[plot.columns] == column_value
                    and (plot.rows is None or r[plot.rows] == row_value)
                ),
                key=lambda r: r[plot.x],
            )
            if not panel:
                continue
            ax = axes[i][j]
            for name in names:
                points = [(r[plot.x], r[f"{name}_us"]) for r in panel if f"{name}_us" in r]
                if points:
                    ax.plot(*zip(*points), marker="o", label=name)
            ax.set(
                xscale="log",
                yscale="log",
                xlabel=plot.xlabel,
                ylabel="us",
                title=plot.panel_title.format(**panel[0]),
            )
            ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def write_json(path: str, report: dict) -> None:
    """``report`` as indented JSON at ``path``."""
    with open(path, "w") as f:
        json.dump(report, f, indent=2)


def read_json_argument(path: str) -> dict:
    """A report named on the command line (an argparse ``type``): a missing or
    malformed file is a one-line usage error, not a traceback."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as exc:
        raise argparse.ArgumentTypeError(f"cannot read the report {path}: {exc}") from exc


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
    (``scripts/bench_compare.py tokens``)."""
    torch.save(tokens, path)
    print(f"wrote the tokens of {len(tokens)} cases to {path}")


def case_label(row: dict, keys: Sequence[str]) -> str:
    """``"B=64,V=32000"``: a case's key values, the ``--dump-tokens`` label."""
    return ",".join(f"{key}={row[key]}" for key in keys)


def timed_columns(results: list[dict], names: Sequence[str], unit: str = "us") -> list[str]:
    """The names, in order, that have a ``<name>_<unit>`` value in at least one row."""
    return [n for n in names if any(f"{n}_{unit}" in r for r in results)]


def timing_text(row: dict, name: str, unit: str = "us") -> str:
    """``"12.3us (45%)"``, ``"12.3us"`` without a rate, or ``"-"``."""
    value = row.get(f"{name}_{unit}")
    if value is None:
        return "-"
    pct = row.get(f"{name}_pct_copy_bw")
    return f"{value:.1f}{unit}" + ("" if pct is None else f" ({pct:.0f}%)")


def check_text(value: bool | None) -> str:
    return {True: "yes", False: "NO", None: "-"}[value]


def console_table(
    results: list[dict],
    keys: Sequence[str],
    names: Sequence[str],
    checks: Sequence[str] = (),
    ratios: Sequence[str] = (),
    unit: str = "us",
) -> str:
    """The run's table as aligned text: key columns, one cell per name with a
    ``<name>_<unit>`` value, then a yes/NO cell per check and an ``x.xx``
    cell per ratio."""
    shown = timed_columns(results, names, unit)
    header = [*keys, *shown, *checks, *ratios]
    rows = [
        [str(r[k]) for k in keys]
        + [timing_text(r, n, unit) for n in shown]
        + [check_text(r.get(c)) for c in checks]
        + [f"{r[q]:.2f}" if q in r else "-" for q in ratios]
        for r in results
    ]
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows)]
    return "\n".join(
        " ".join(f"{cell:>{w}}" for cell, w in zip(line, widths)) for line in [header, *rows]
    )


def markdown_table(report: dict, keys: Sequence[str], names: Sequence[str]) -> str:
    """A report as a Markdown table (docs/benchmarks.md): the key columns,
    then ``<us> (<pct>%)`` for each name the first row timed."""
    first = report["results"][0]
    names = [n for n in names if f"{n}_us" in first]
    bandwidth = report.get("copy_bandwidth_gbps") or report.get("copy_bandwidth_GBps")
    lines = [
        f"{report['gpu']}, measured copy bandwidth {bandwidth:.0f} GB/s; "
        f"median us (% of copy bandwidth for the bytes the op must read)",
        "",
        "| " + " | ".join([*keys, *names]) + " |",
        "|" + "---|" * (len(keys) + len(names)),
    ]
    for row in report["results"]:
        cells = [str(row[k]) for k in keys]
        for name in names:
            us, pct = row.get(f"{name}_us"), row.get(f"{name}_pct_copy_bw")
            cells.append(
                "-" if us is None else f"{us:.1f}" + ("" if pct is None else f" ({pct:.0f}%)")
            )
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def key_text(value: object) -> str:
    """A key cell: a dict (a shape) as ``"B=4 V=1024"``, anything else as it prints."""
    if isinstance(value, dict):
        return " ".join(f"{key}={item}" for key, item in value.items())
    return str(value)


def spread_text(row: dict, side: str) -> str:
    """``"12.3 (spread 4%)"``: a side's median us and its rounds' spread, or ``"-"``."""
    if f"{side}_us" not in row:
        return "-"
    return f"{row[f'{side}_us']:.1f} (spread {row[f'{side}_us_spread_pct']:.0f}%)"


def paired_markdown_table(
    rows: Sequence[dict], keys: Sequence[str], sides: tuple[str, str], ratio_header: str
) -> str:
    """Rows of sides timed against each other as a Markdown table: the key
    columns, median us and spread of the rounds ((max - min) / median) per
    side, the ``ratio``, and the note, error or skip reason."""
    lines = [
        "| " + " | ".join([*keys, *(f"{side} us" for side in sides), ratio_header, "note"]) + " |",
        "|" + "---|" * (len(keys) + len(sides) + 2),
    ]
    for row in rows:
        ratio = f"{row['ratio']:.2f}x" if "ratio" in row else "-"
        note = row.get("error") or row.get("skipped") or row.get("note", "")
        if "error" in row:
            note = f"ERROR: {note}"
        elif "skipped" in row:
            note = f"skipped: {note}"
        cells = [key_text(row[key]) for key in keys] + [spread_text(row, side) for side in sides]
        lines.append("| " + " | ".join([*cells, ratio, note.replace("|", "/")]) + " |")
    return "\n".join(lines)
