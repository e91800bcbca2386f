"""Render the benchmark JSON files written by `python3 -m benchmarks AREA`
as Markdown tables (for docs/benchmarks.md).

    python3 scripts/bench_tables.py docs/bench-data/sampler-h100.json [...]

An end-to-end report (``bench e2e``, recognised by its ``cells``) is rendered
by that benchmark's own renderer. Each area's key columns and table columns come from its declaration
(``AREA.keys``, ``AREA.table_columns``); a report names its area in
``benchmark``, and an older one without that field is recognised by its keys
and first column.
"""

import json
import sys
from pathlib import Path

# benchmarks/ is not installed with the package: it is read from this checkout.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import ngram, rejection, sampler, topk_topp  # noqa: E402
from benchmarks.e2e import report as e2e_report  # noqa: E402
from benchmarks.harness import Area  # noqa: E402

AREAS = {area.name: area for area in (m.AREA for m in (rejection, topk_topp, ngram, sampler))}


def area_of(report: dict) -> Area:
    if report.get("benchmark") in AREAS:
        return AREAS[report["benchmark"]]
    first = report["results"][0]
    return next(
        area
        for area in AREAS.values()
        if all(k in first for k in area.keys)
        and f"{(area.table_columns or tuple(area.candidates))[0]}_us" in first
    )


def is_e2e(report: dict) -> bool:
    return "cells" in report


def render(path: str) -> str:
    with open(path) as f:
        report = json.load(f)
    if is_e2e(report):
        return e2e_report.render_markdown(report)
    return area_of(report).markdown(path)


if __name__ == "__main__":
    for p in sys.argv[1:]:
        print(f"<!-- {p} -->\n{render(p)}\n")
