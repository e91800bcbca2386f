"""Render the benchmark JSON files written by `vllm-sampling-plugin bench AREA`
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

from vllm_sampling_plugin.bench import ngram, rejection, sampler, topk_topp
from vllm_sampling_plugin.bench.e2e import report as e2e_report
from vllm_sampling_plugin.bench.harness import Area

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
