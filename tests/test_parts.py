"""The parts table: owners from the seams' shapes, ratios from data, the docs built from both."""

import json
import re
from pathlib import Path

import pytest

from tests.scripts_dir import load_script
from vllm_sampling_plugin import measurements
from vllm_sampling_plugin.integration.parts import (
    END_TO_END,
    PARTS,
    WHY_PLUGIN,
    WHY_PLUGIN_BY_SETTING,
    WHY_UPSTREAM,
    WHY_UPSTREAM_IN_SHAPE,
    WHY_UPSTREAM_PART,
    SEAM_OF_PART,
    Owner,
    compatibility_markdown,
    line_found,
    other_choice,
    parts_rows,
    parts_summary,
)
from vllm_sampling_plugin.integration.common import shapes
from vllm_sampling_plugin.integration.version import (
    LINE_SEAMS,
    SUPPORTED_LINES,
    release_line,
)

DOC = Path(__file__).resolve().parents[1] / "docs" / "compatibility.md"


def test_every_line_decides_every_seam():
    for line in SUPPORTED_LINES:
        assert set(LINE_SEAMS[line]) == set(shapes.SEAMS), line
    assert set(SEAM_OF_PART) == set(PARTS)


def test_0_20_takes_everything_over():
    rows = parts_rows(line_found("0.20"), "0.20")
    assert all(owner == Owner.PLUGIN.value for _, owner, _, _ in rows)


@pytest.mark.parametrize("line", SUPPORTED_LINES)
def test_every_line_takes_the_draw(line):
    """Issue 23: at least the draw wherever the V2 runner has one."""
    assert LINE_SEAMS[line][shapes.DRAW] is not None
    assert LINE_SEAMS[line][shapes.WARM_UP] is not None


@pytest.mark.parametrize("line", ["0.32", "0.33"])
def test_upstream_sampler_lines_keep_upstream_settings(line):
    owners = {part: owner for part, owner, _, _ in parts_rows(line_found(line), line)}
    assert owners["use_fp64_gumbel setting"] == "upstream"
    assert owners["VLLM_USE_FLASHINFER_SAMPLER"] == "upstream"
    # Unless VLLM_USE_FLASHINFER_SAMPLER=1 asks for FlashInfer.
    assert owners["top-k/top-p, batches FlashInfer may take"] == "plugin"


@pytest.mark.parametrize("line", ["0.32", "0.33"])
def test_a_setting_part_is_owned_as_the_lines_default_says(line):
    """The verify-step and policy shapes are the same on 0.32 and 0.33; who
    verifies an engine's drafts, and with which policy, when it names
    nothing is the line's default (integration/settings/defaults.py: the plugin's
    verification and the adaptive policy on both), and the table names the
    flag that flips each."""
    owners = {part: o for part, o, _, _ in parts_rows(line_found(line), line)}
    for part in ("speculative verification owner", "rejection sampling"):
        assert owners[part] == Owner.PLUGIN.value, (line, part)
    assert owners["adaptive speculation policy"] == Owner.PLUGIN.value, line
    row = next(r for r in compatibility_markdown().splitlines() if r.startswith(f"| {line}.x"))
    assert "verification (--plugin-verification upstream opts out)" in row
    assert "speculation policy (--speculation-policy fixed opts out)" in row
    plugins_parts = parts_summary(line_found(line)).split("; upstream:")[0]
    assert "speculative verification owner" in plugins_parts
    assert "adaptive speculation policy" in plugins_parts


def test_a_newer_release_with_known_shapes_gets_their_defaults():
    """The defaults are the shapes', not a release's: a release newer than
    0.33 whose seams keep 0.33's shapes (what ``info`` finds on it) gets the
    plugin's verification and policy as 0.33 does, and the flags that give
    them back to upstream are named."""
    found, line = line_found("0.33"), "0.34"
    owners = {part: o for part, o, _, _ in parts_rows(found, line)}
    for part, choice in (("speculative verification owner", "--plugin-verification upstream"),
                         ("rejection sampling", "--plugin-verification upstream"),
                         ("adaptive speculation policy", "--speculation-policy fixed")):
        assert owners[part] == Owner.PLUGIN.value, part
        assert other_choice(part, found) == choice, part
    assert "adaptive speculation policy" in parts_summary(found).split("; upstream:")[0]


def test_unmeasured_lines_say_so():
    rows = parts_rows(line_found("0.27"), "0.27")
    assert {ratio for _, _, _, ratio in rows} == {measurements.NOT_MEASURED}


@pytest.mark.parametrize("line", ["0.32", "0.33", "0.34"])
def test_newer_line_ratios_name_their_measurement(line):
    for part, entry in measurements.load()[line].items():
        source = entry["source"]
        assert "bench upstream" in source or "bench e2e" in source, part


# What `info` prints of a measurement, beside the part's name and owner, on
# one line of at most 200 characters (tests/test_cli.py).
HEADLINE_MAX = 140


def test_every_measurement_is_a_headline_that_names_its_gpu():
    """issue 60: one small data file; the detail is docs/benchmarks.md's."""
    for line, parts in measurements.load().items():
        assert set(parts) <= {*PARTS, END_TO_END}, line
        assert END_TO_END in parts, line
        for part, entry in parts.items():
            assert len(measurements.ratio_text(line, part)) <= HEADLINE_MAX, (line, part)
            assert re.search(r"\bH[12]00\b", entry["source"]), (line, part)


def test_no_measured_prose_in_the_parts_strings():
    """issue 60: ratios, GPUs and dates live in data/measurements.json."""
    for table in (WHY_PLUGIN, WHY_UPSTREAM, WHY_PLUGIN_BY_SETTING, WHY_UPSTREAM_IN_SHAPE,
                  WHY_UPSTREAM_PART):
        for key, why in table.items():
            assert not re.search(r"\d\.\d+x\b|\bH[12]00\b|\b20\d\d-\d\d-\d\d\b", why), key


def test_summary_names_the_owners():
    summary = parts_summary(line_found("0.32"))
    assert summary.startswith("plugin: Gumbel-max")
    assert "upstream: " in summary and "rejection sampling" in summary


@pytest.mark.parametrize(
    "found, line",
    [("0.20.2", "0.20"), ("0.21.0", "0.21"), ("0.26.0", "0.26"), ("0.32.3rc1", "0.32"),
     ("0.33.0", "0.33"), ("0.33.1rc1", "0.33"), ("0.34.0", "0.34"), ("0.19.1", None),
     (None, None)],
)
def test_release_line(found, line):
    assert release_line(found) == line


def test_table_has_one_row_per_supported_line():
    rows = compatibility_markdown().splitlines()[2:]
    assert [row.split(" | ")[0] for row in rows] == [f"| {line}.x" for line in SUPPORTED_LINES]


def test_compatibility_doc_holds_the_rendered_table():
    render = load_script("render_docs")
    assert render.between(DOC.read_text(), "parts table") == compatibility_markdown().strip()
