"""The measured ratios behind ``vllm-sampling-plugin info``, kept as data.

``data/measurements.json`` maps a release line and a part
(integration/parts.py's names) to ``{"ratio": ..., "source": ...}``: what a
GPU run measured, plugin against upstream on that line, and which run. The
bench commands write it (:func:`record`); ``info``, the register log line and
docs/compatibility.md read it. A line or part without an entry reads as
"not measured".
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


def record(line: str, part: str, ratio: str, source: str, path: Path = PATH) -> None:
    """Store (or replace) one measurement; the file stays sorted and readable."""
    measured = load(path) if path.exists() else {}
    measured.setdefault(line, {})[part] = {"ratio": ratio, "source": source}
    ordered = {
        key: measured[key]
        for key in sorted(measured, key=lambda line: tuple(map(int, line.split("."))))
    }
    path.write_text(json.dumps(ordered, indent=2) + "\n")
