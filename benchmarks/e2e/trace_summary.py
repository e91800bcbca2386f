"""Issue 63's summary: one table per real-text workload, gathered from the
trace cells of several bench e2e reports (each GPU call measures a few
cells; the summary is every cell the speculation rule in place has run).

``python3 -m benchmarks trace_summary [REPORT.json ...] [--plots DIR]``
prints the tables (default: :data:`RULE_IN_PLACE`) and, with ``--plots``,
writes ``e2e-trace-summary-<workload>.png`` per workload into DIR (each
configuration's speed-up over no speculation against the concurrency, the
reports' cells together). ``scripts/render_docs.py`` puts the tables into
docs/benchmarks.md.

A row is one method at one concurrency; a column one configuration the
plugin's policy ran against in interleaved pairs, as the median of the
pairs' ratios [min, max]. A cell measured in several reports lists each,
in the order the reports are given, so a repeat shows its spread. "not
run" marks the cells the rule in place has no measurement of yet.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from benchmarks.e2e import report
from benchmarks.e2e.traces import ADAPTIVE_VERIFICATION_METHODS, CONCURRENCIES, METHODS
from benchmarks.workloads.build import WORKLOADS

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "docs" / "bench-data"

# The reports of the speculation rule in place (the rate as drafts accepted
# over drafts tried): a GPU call that measures it adds its report here.
RULE_IN_PLACE = (
    "e2e-trace-agentic-code-edit-ngram-draft-rate-8b-k3-b16-64-0.34-h100.json",
    "e2e-trace-summarize-chat-ngram-draft-rate-8b-k3-b64-0.34-h100.json",
    "e2e-trace-summarize-chat-code-edit-agentic-ngram-draft-rate-8b-k3-b1-64-0.34-h100.json",
)

# Column -> how a cell's ``against`` names that configuration.
COLUMNS = {
    "no speculation": "nospec",
    "stock's fixed k": "upstream",
    "stock's adaptive verification": "upstream-adaptive",
    "A/A twin": report.CONTROL_SUFFIX,
}


def load(names: list[str]) -> list[dict]:
    """The reports ``names`` (paths, or names under docs/bench-data)."""
    reports = []
    for name in names:
        path = Path(name) if os.sep in name else DATA / name
        reports.append(json.loads(path.read_text()))
    return reports


def trace_cells(reports: list[dict]) -> list[dict]:
    """Every trace-replay cell of the reports, in order."""
    return [c for r in reports for c in r.get("speculation", []) if c.get("trace_replay")]


def _column(cell: dict) -> str | None:
    against = cell["against"]
    for column, name in COLUMNS.items():
        if against == name or (name == report.CONTROL_SUFFIX and against.endswith(name)):
            return column
    return None


def _ratio(cell: dict) -> str:
    p = cell["paired"]
    return f"{p['median']:.3f} [{p['min']:.3f}, {p['max']:.3f}]"


def workload_table(cells: list[dict], workload: str) -> str:
    """The markdown table of one workload: a row per method and concurrency,
    a column per configuration, then the acceptance lengths (the plugin's /
    stock's fixed k) and how many requests emitted exactly their traces."""
    header = ["method", "sequences", *COLUMNS, "acceptance length plugin / stock",
              "requests whose tokens equal their traces"]
    rows = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for method in METHODS:
        for seqs in CONCURRENCIES:
            mine = [c for c in cells if (c["workload"], c["method"], c["max_num_seqs"])
                    == (workload, method, seqs)]
            entries = []
            for column in COLUMNS:
                ratios = [_ratio(c) for c in mine if _column(c) == column]
                if ratios:
                    entries.append("; ".join(ratios))
                elif (column == "stock's adaptive verification"
                      and method not in ADAPTIVE_VERIFICATION_METHODS):
                    entries.append("none for this method")
                else:
                    entries.append("not run")
            entries.append(_acceptance(mine))
            checked = [c["identity"] for c in mine if c.get("identity")]
            entries.append(f"{sum(i['identical'] for i in checked)}/"
                           f"{sum(i['requests'] for i in checked)}" if checked else "-")
            rows.append(f"| {method} | {seqs} | " + " | ".join(entries) + " |")
    return "\n".join(rows)


def _acceptance(cells: list[dict]) -> str:
    plugin = [c["acceptance"]["mean_acceptance_length"] for c in cells
              if c["acceptance"].get("mean_acceptance_length")]
    stock = [c["base_acceptance"]["mean_acceptance_length"] for c in cells
             if _column(c) == "stock's fixed k"
             and c.get("base_acceptance", {}).get("mean_acceptance_length")]
    if not plugin:
        return "-"
    return f"{plugin[-1]:.2f} / " + (f"{stock[-1]:.2f}" if stock else "-")


def summary_markdown(reports: list[dict]) -> str:
    """One table per workload, under a line naming the GPU and vLLM."""
    cells = trace_cells(reports)
    machines = sorted({(r.get("gpu") or "GPU not recorded", r.get("vllm", "?")) for r in reports})
    ks = sorted({c["k"] for c in cells})
    parts = ["Measured on " + "; ".join(f"{gpu}, vLLM {vllm}" for gpu, vllm in machines)
             + f"; k={','.join(map(str, ks))}; one A/A twin per cell where run."]
    for workload in WORKLOADS:
        parts += ["", f"**{workload}**", "", workload_table(cells, workload)]
    return "\n".join(parts)


def write_plots(reports: list[dict], out_dir: str) -> list[str]:
    """``e2e-trace-summary-<workload>.png`` per workload in ``out_dir``."""
    merged = {"gpu": reports[0].get("gpu") if reports else None,
              "speculation": trace_cells(reports)}
    paths = []
    for path in report.plot_traces(merged, out_dir):
        target = os.path.join(out_dir, os.path.basename(path).replace(
            "e2e-trace-", "e2e-trace-summary-"))
        os.replace(path, target)
        paths.append(target)
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m benchmarks trace_summary",
        description="Real-text speculation cells of bench e2e trace reports, a table per workload.")
    parser.add_argument("reports", nargs="*", default=list(RULE_IN_PLACE),
                        help="reports (paths, or names under docs/bench-data); "
                             "default: the rule in place's")
    parser.add_argument("--plots", metavar="DIR", help="also write one PNG per workload here")
    args = parser.parse_args(argv)
    reports = load(args.reports)
    print(summary_markdown(reports))
    if args.plots:
        for path in write_plots(reports, args.plots):
            print(f"wrote {path}")
    return 0
