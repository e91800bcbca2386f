"""The four benchmark areas' declarations (no GPU needed to check them) and
the scripts that read their reports."""

import json
import pathlib
import subprocess
import sys

import pytest
import torch

from benchmarks import ngram, rejection, sampler, topk_topp, upstream
from benchmarks.e2e import report
from vllm_sampling_plugin.integration.parts import PARTS

ROOT = pathlib.Path(__file__).resolve().parents[2]
AREAS = [sampler.AREA, topk_topp.AREA, rejection.AREA, ngram.AREA]
sys.path.insert(0, str(ROOT / "scripts"))
import bench_compare  # noqa: E402
import bench_tables  # noqa: E402


@pytest.mark.parametrize("area", AREAS, ids=lambda a: a.name)
def test_every_named_column_is_a_candidate(area):
    names = set(area.candidates)
    for check in area.checks:
        assert {check.first, check.second} <= names
        assert area.candidates[check.first].tokens and area.candidates[check.second].tokens
    for ratio in area.ratios:
        assert {ratio.numerator, ratio.denominator} <= names
    assert set(area.table_columns or ()) <= names


@pytest.mark.parametrize(
    "area, argv",
    [
        (sampler.AREA, ["--tune", "--apply-temperature", "--tune-vocab-size", "1000"]),
        (topk_topp.AREA, ["--profile", "--top-k", "0", "--top-p", "0.95", "--logit-scale", "1"]),
        (rejection.AREA, ["--tune", "--tune-rep-ms", "5", "--num-spec", "2", "--draft-noise", "1",
                          "--logits-dtype", "bfloat16"]),
        (ngram.AREA, ["--no-cpu", "--no-compile", "--requests", "4", "--lengths", "64"]),
    ],
    ids=lambda x: getattr(x, "name", ""),
)
def test_existing_flags_parse(area, argv):
    args = area.parser().parse_args([*argv, "--dump-tokens", "t.pt", "--out", "o"])
    assert args.dump_tokens == "t.pt" and args.out == "o"
    assert args.columns == list(area.candidates)


def test_ngram_flags_skip_columns():
    args = ngram.AREA.parser().parse_args(["--no-cpu", "--no-compile"])
    assert ngram.AREA.selected(args) == ["plugin", "v1_gpu_eager"]
    args = ngram.AREA.parser().parse_args(["--no-v1-gpu"])
    assert ngram.AREA.selected(args) == ["plugin", "cpu_numba"]


def test_ngram_drafts_agree_only_within_the_draft_count():
    plugin = (torch.tensor([[5, 6, 9], [7, 9, 9]]), torch.tensor([2, 0], dtype=torch.int32))
    cpu = (
        torch.tensor([[5, 6, 0], [0, 0, 0]], dtype=torch.int32),
        torch.tensor([2, 0], dtype=torch.int32),
    )
    assert ngram.drafts_agree(plugin, cpu)
    assert not ngram.drafts_agree((plugin[0], torch.tensor([1, 0], dtype=torch.int32)), cpu)
    assert not ngram.drafts_agree((torch.tensor([[5, 7, 9], [7, 9, 9]]), plugin[1]), cpu)


def test_bench_modules_need_a_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for area in AREAS:
        with pytest.raises(SystemExit, match=f"the {area.name} benchmark needs a CUDA GPU"):
            area.main(["--out", "unused"])


# The reports docs/ cites beside those only the run log cites (docs/lab/).
REPORTS = sorted(p for data in (ROOT / "docs" / "bench-data", ROOT / "docs" / "lab" / "bench-data")
                 for p in data.glob("*.json") if "tune" not in p.name)
E2E_REPORTS = [p for p in REPORTS if p.name.startswith("e2e-")]
UPSTREAM_REPORTS = [p for p in REPORTS if p.name.startswith("upstream-")]
AREA_REPORTS = [p for p in REPORTS if p not in E2E_REPORTS + UPSTREAM_REPORTS]


@pytest.mark.parametrize("path", AREA_REPORTS, ids=lambda p: p.name)
def test_bench_tables_renders_every_report_with_its_area_columns(path):
    data = json.loads(path.read_text())
    assert not bench_tables.is_e2e(data)
    area = bench_tables.area_of(data)
    assert path.name.startswith(area.name)
    table = bench_tables.render(str(path)).splitlines()
    columns = [c for c in area.table_columns or area.candidates if f"{c}_us" in data["results"][0]]
    assert table[2] == "| " + " | ".join([*area.keys, *columns]) + " |"
    assert len(table) == 4 + len(data["results"])


@pytest.mark.parametrize("path", E2E_REPORTS, ids=lambda p: p.name)
def test_bench_tables_renders_end_to_end_reports_one_row_per_cell(path):
    data = json.loads(path.read_text())
    assert bench_tables.is_e2e(data)
    table = bench_tables.render(str(path))
    assert table.splitlines()[0].startswith(data["gpu"])
    for cell in data["cells"]:
        label = report.cell_label(cell)
        assert f"| {cell['model']} | {label} | {cell['max_num_seqs']} |" in table


@pytest.mark.parametrize("path", UPSTREAM_REPORTS, ids=lambda p: p.name)
def test_upstream_reports_render_and_give_the_parts_ratios(path):
    """bench upstream's reports (vLLM 0.32 or 0.33 side by side): one table
    row per result, and a ratio string for every part they time."""
    data = json.loads(path.read_text())
    assert data["benchmark"] == "upstream" and data["vllm_line"] in ("0.32", "0.33")
    assert path.name.startswith(f"upstream-{data['vllm_line']}-")
    table = upstream.markdown_table(data["results"]).splitlines()
    assert len(table) == 2 + len(data["results"])
    ratios = upstream.parts_ratios(data)
    assert ratios and set(ratios) <= set(PARTS)
    assert all(data["gpu"] in text for text in ratios.values())


def test_compare_timings_flags_only_what_is_out_of_tolerance():
    old = {"results": [{"B": 1, "a_us": 100.0, "b_us": 10.0, "c_us": 5.0}]}
    new = {"results": [{"B": 1, "a_us": 102.0, "b_us": 10.5}]}
    lines = bench_compare.compare_timings(old, new, 3.0)
    assert lines == [
        "row 0 {'B': 1}: a_us 100.00 -> 102.00 us (x1.020)",
        "row 0 {'B': 1}: b_us 10.00 -> 10.50 us (x1.050) OUT OF TOLERANCE",
    ]
    assert bench_compare.compare_timings(old, new, 3.0, columns=["a"]) == lines[:1]
    assert bench_compare.compare_timings(old, new, 3.0, min_us=50) == lines[:1]
    # Only numeric timings count: a per-kernel dict ending in _us is skipped.
    kernels = {"results": [{"B": 1, "k_us": {"x": 1.0}, "a_us": 1.0}]}
    assert bench_compare.compare_timings(kernels, kernels, 3.0) == [
        "row 0 {'B': 1}: a_us 1.00 -> 1.00 us (x1.000)"
    ]
    assert bench_compare.compare_timings(old, {"results": []}, 3.0)[0].endswith("OUT OF TOLERANCE")


def test_compare_tokens_reports_differences_and_missing(tmp_path):
    old = {"B=1": {"p": (torch.tensor([1, 2]), torch.tensor([1])), "s": torch.tensor([3])}}
    same = {"B=1": {"p": (torch.tensor([1, 2]), torch.tensor([1])), "s": torch.tensor([3])}}
    assert bench_compare.compare_tokens(old, same) == []
    changed = {
        "B=1": {"p": (torch.tensor([1, 2]), torch.tensor([2])), "q": torch.tensor([3])},
        "B=2": {},
    }
    assert bench_compare.compare_tokens(old, changed) == [
        "B=1 p: tokens differ",
        "B=1 q: only in new",
        "B=1 s: only in old",
        "B=2: only in new",
    ]
    # dtype counts: int32 and int64 tokens are not the same output.
    assert bench_compare.compare_tokens(
        {"c": {"t": torch.tensor([1])}}, {"c": {"t": torch.tensor([1], dtype=torch.int32)}}
    )
    torch.save(old, tmp_path / "old.pt")
    torch.save(changed, tmp_path / "new.pt")
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "bench_compare.py"),
            "tokens",
            str(tmp_path / "old.pt"),
            str(tmp_path / "old.pt"),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0 and "tokens identical in all 1 cases" in proc.stdout
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "bench_compare.py"),
            "tokens",
            str(tmp_path / "old.pt"),
            str(tmp_path / "new.pt"),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1 and "B=1 p: tokens differ" in proc.stdout


def test_op_before_after_imports_a_second_revision_beside_this_one():
    import op_before_after
    from dump_op_tokens import op_cases

    from vllm_sampling_plugin import ops

    old_ops = op_before_after.import_old_ops(str(ROOT))
    assert old_ops.__name__ == f"{op_before_after.OLD_NAME}.ops"
    assert old_ops.sample is not ops.sample
    cases = zip(op_cases(old_ops, "cpu", 256, 1), op_cases(ops, "cpu", 256, 1))
    (old_name, old_call), (new_name, new_call) = next(cases)
    assert old_name == new_name == "sample_B1_fp32"
    assert bench_compare.equal_outputs(old_call(), new_call())
