"""Writes the measured ratios ``vllm-sampling-plugin info`` shows.

The wheel ships the data (``vllm_sampling_plugin/data/measurements.json``)
and its reader (``vllm_sampling_plugin/measurements.py``); only the lab
writes it: ``upstream --ratios ... --record`` and ``e2e --record``, run from
a checkout, store each run's ratio here under the run's release line.
"""

from __future__ import annotations

import json
from pathlib import Path

from vllm_sampling_plugin.measurements import PATH, load


def record(line: str, part: str, ratio: str, source: str, path: Path = PATH) -> None:
    """Store (or replace) one measurement; the file stays sorted and readable."""
    measured = load(path) if path.exists() else {}
    measured.setdefault(line, {})[part] = {"ratio": ratio, "source": source}
    ordered = {
        key: measured[key]
        for key in sorted(measured, key=lambda line: tuple(map(int, line.split("."))))
    }
    path.write_text(json.dumps(ordered, indent=2) + "\n")
