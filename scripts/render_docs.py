"""Rewrite the tables the documents hold as rendered text: README.md's
"your vLLM" table and docs/compatibility.md's parts table, both built from
the measured-release table (integration/version.py) and
data/measurements.json (written by benchmarks/), and docs/benchmarks.md's
real-text summary, built from the trace reports
benchmarks/e2e/trace_summary.py names. Adding a release there, recording a
measurement, or naming a new trace report is followed by

    python3 scripts/render_docs.py

tests/test_docs.py and tests/test_parts.py fail while a table is stale.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _bounds(text: str, marker: str) -> tuple[int, int]:
    """Where the text between ``<!-- MARKER: begin -->`` (and its newline)
    and ``<!-- MARKER: end -->`` starts and ends."""
    begin = f"<!-- {marker}: begin -->\n"
    return text.index(begin) + len(begin), text.index(f"<!-- {marker}: end -->")


def between(text: str, marker: str) -> str:
    """The rendered table ``text`` holds under ``marker``, stripped."""
    start, end = _bounds(text, marker)
    return text[start:end].strip()


def replace_between(path: Path, marker: str, body: str) -> bool:
    """Put ``body`` between ``<!-- MARKER: begin -->`` and ``<!-- MARKER: end -->``;
    True where the file changed."""
    text = path.read_text()
    start, end = _bounds(text, marker)
    new = text[:start] + body.strip() + "\n" + text[end:]
    if new == text:
        return False
    path.write_text(new)
    return True


def main() -> int:
    sys.path.insert(0, str(ROOT))
    from benchmarks.e2e.trace_summary import RULE_IN_PLACE, load, summary_markdown
    from vllm_sampling_plugin.integration.parts import compatibility_markdown, readme_markdown

    for path, marker, body in (
        (ROOT / "README.md", "vllm table", readme_markdown()),
        (ROOT / "docs" / "compatibility.md", "parts table", compatibility_markdown()),
        (ROOT / "docs" / "benchmarks.md", "trace summary",
         summary_markdown(load(list(RULE_IN_PLACE)))),
    ):
        changed = replace_between(path, marker, body)
        print(f"{path.relative_to(ROOT)}: {'rewritten' if changed else 'unchanged'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
