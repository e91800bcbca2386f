"""The per-line parts table, and the docs built from it."""

from pathlib import Path

import pytest

from vllm_sampling_plugin.integration.parts import (
    LINE_PARTS,
    PARTS,
    Owner,
    compatibility_markdown,
    parts_summary,
)
from vllm_sampling_plugin.integration.version import (
    LINE_0_20,
    LINE_0_32,
    LINE_0_33,
    SUPPORTED_LINES,
    release_line,
)

DOC = Path(__file__).resolve().parents[1] / "docs" / "compatibility.md"


def test_every_supported_line_decides_every_part():
    assert set(LINE_PARTS) == set(SUPPORTED_LINES)
    for line in SUPPORTED_LINES:
        assert set(LINE_PARTS[line]) == set(PARTS), line


def test_0_20_takes_everything_over():
    assert all(c.owner is Owner.PLUGIN for c in LINE_PARTS[LINE_0_20].values())


@pytest.mark.parametrize("line", [LINE_0_32, LINE_0_33])
def test_upstream_sampler_lines_keep_upstream_settings(line):
    owners = {part: choice.owner for part, choice in LINE_PARTS[line].items()}
    assert owners["use_fp64_gumbel setting"] is Owner.UPSTREAM
    assert owners["VLLM_USE_FLASHINFER_SAMPLER"] is Owner.UPSTREAM
    # Unless VLLM_USE_FLASHINFER_SAMPLER=1 asks for FlashInfer.
    assert owners["top-k/top-p, batches FlashInfer may take"] is Owner.PLUGIN


@pytest.mark.parametrize("line", [LINE_0_32, LINE_0_33])
def test_newer_line_ratios_name_their_measurement(line):
    """Every kernel part of 0.32 and 0.33 was timed against upstream on the
    H100 (bench upstream); its ratio says where the number comes from."""
    for part, choice in LINE_PARTS[line].items():
        if choice.ratio != "n/a":
            assert "bench upstream" in choice.ratio and "H100" in choice.ratio, part


def test_0_32_and_0_33_take_over_the_same_parts():
    owners = {line: {p: c.owner for p, c in LINE_PARTS[line].items()}
              for line in (LINE_0_32, LINE_0_33)}
    assert owners[LINE_0_32] == owners[LINE_0_33]


def test_summary_names_the_owners():
    summary = parts_summary(LINE_0_32)
    assert summary.startswith("plugin: Gumbel-max")
    assert "upstream: " in summary and "rejection sampling" in summary


@pytest.mark.parametrize(
    "found, line",
    [("0.20.2", "0.20"), ("0.32.0", "0.32"), ("0.32.3rc1", "0.32"),
     ("0.33.0", "0.33"), ("0.33.1rc1", "0.33"), ("0.34.0", None), ("0.21.0", None),
     (None, None)],
)
def test_release_line(found, line):
    assert release_line(found) == line


def test_table_has_one_column_per_supported_line():
    header = compatibility_markdown().splitlines()[0]
    assert header == "| part | " + " | ".join(f"vLLM {line}.x" for line in SUPPORTED_LINES) + " |"


def test_compatibility_doc_holds_the_rendered_table():
    text = DOC.read_text()
    begin = text.index("<!-- parts table: begin -->\n") + len("<!-- parts table: begin -->\n")
    end = text.index("<!-- parts table: end -->")
    assert text[begin:end].strip() == compatibility_markdown().strip()
