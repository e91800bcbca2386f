"""The measured ratios behind ``vllm-sampling-plugin info``, kept as data.

``data/measurements.json`` maps a release line and a part
(integration/parts.py's names) to ``{"ratio": ..., "source": ...}``: what a
GPU run measured, plugin against upstream on that line, and which run. Only
the lab in the checkout's ``benchmarks/`` writes it (benchmarks/measurements.py);
``info``, the register log line and docs/compatibility.md read it. A line or
part without an entry reads as "not measured".
"""

from __future__ import annotations

import json
from pathlib import Path

PATH = Path(__file__).resolve().parent / "data" / "measurements.json"
NOT_MEASURED = "not measured"


def load(path: Path = PATH) -> dict[str, dict[str, dict[str, str]]]:
    return json.loads(path.read_text())


def ratio_text(line: str, part: str, measured: dict | None = None) -> str:
    """``"<ratio> (<source>)"`` for ``part`` on ``line``, or "not measured"."""
    entry = (load() if measured is None else measured).get(line, {}).get(part)
    if entry is None:
        return NOT_MEASURED
    return f"{entry['ratio']} ({entry['source']})" if entry["source"] else entry["ratio"]

