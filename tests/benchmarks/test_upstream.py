"""``bench upstream``: the report helpers anywhere, and the whole run on the
CPU (Triton's interpreter, tiny shapes) where vLLM 0.32 is installed."""

import json
import os
import subprocess
import sys

import pytest
import torch

from tests import fresh_interpreter
from tests.commands import last_line, run_lab
from tests.integration.helpers import QUIET_ENV, REPO_ROOT
from tests.vllm_lines import INSTALLED_LINE, INSTALLED_VERSION, needs_vllm_line
from benchmarks import upstream
from vllm_sampling_plugin.integration import parts


def run_module(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return fresh_interpreter.run(
        ["-m", "benchmarks.upstream", *argv],
        env={**os.environ, **QUIET_ENV, **(env or {})},
        cwd=REPO_ROOT,
        timeout=600,
    )


def measured(part: str, variant: str, shape: dict, ratio: float) -> dict:
    return {"part": part, "variant": variant, "shape": shape, "ratio": ratio}


REPORT = {
    "gpu": "NVIDIA H100 80GB HBM3",
    "results": [
        measured("gumbel", "fp32", {"B": 64, "V": 151936}, 1.104),
        measured("gumbel", "fp64", {"B": 64, "V": 151936}, 0.97),
        measured("gumbel", "fp32", {"B": 1024, "V": 128256}, 1.31),
        measured("gumbel", "fp64", {"B": 1024, "V": 128256}, 0.971),
        measured("rejection", "ngram", {"B": 64, "K": 3, "V": 151936}, 0.8),
        {"part": "ngram", "variant": "n=2-3", "shape": {"R": 256}, "error": "TypeError: x"},
        {"part": "flashinfer", "variant": "fp32", "shape": {"B": 64}, "skipped": "not asked"},
    ],
}


def test_parts_ratios_names_parts_py_rows_and_ranges():
    ratios = upstream.parts_ratios(REPORT)
    assert set(ratios) == {parts.GUMBEL, parts.REJECTION}
    assert ratios[parts.GUMBEL] == (
        "upstream/plugin: fp32 1.10-1.31x, fp64 0.97x at B=64-1024, V=128256-151936 "
        "(bench upstream, NVIDIA H100 80GB HBM3)"
    )
    assert ratios[parts.REJECTION].startswith("upstream/plugin: ngram 0.80x at B=64, K=3,")


def test_ratios_flag_prints_them(tmp_path):
    path = tmp_path / "upstream.json"
    path.write_text(json.dumps(REPORT))
    proc = run_module("--ratios", str(path))
    assert proc.returncode == 0, proc.stderr
    assert f"{parts.GUMBEL}: upstream/plugin: fp32 1.10-1.31x" in proc.stdout


def test_markdown_table_shows_errors_and_skips():
    table = upstream.markdown_table(REPORT["results"]).splitlines()
    assert len(table) == 2 + len(REPORT["results"])
    assert "ERROR: TypeError: x" in table[-2]
    assert "skipped: not asked" in table[-1]


def test_every_part_maps_to_a_parts_py_row():
    assert set(upstream.PART_NAMES.values()) <= set(parts.PARTS)


def test_importing_and_help_need_no_vllm():
    code = (
        "import sys\n"
        "from benchmarks.__main__ import main\n"
        "try:\n"
        "    main(['upstream', '--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(sorted(m for m in sys.modules if m == 'vllm' or m.startswith('vllm.')))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    assert "--flashinfer" in proc.stdout
    # The CPU path needs upstream's kernels too: the help says which vLLM has them.
    assert "Needs vLLM 0.32 or 0.33" in " ".join(proc.stdout.split())
    assert proc.stdout.strip().splitlines()[-1] == "[]"


@needs_vllm_line("0.32", "0.33")
def test_cpu_run_checks_every_signature_against_the_installed_line(tmp_path):
    """0.33's ``_sample_random`` takes one more argument than 0.32's: a run
    that calls every upstream function once catches such a change."""
    proc = run_module(
        "--device", "cpu", "--small", "--out", str(tmp_path), env={"TRITON_INTERPRET": "1"}
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-6000:]
    data = json.loads((tmp_path / "upstream.json").read_text())
    assert data["vllm_line"] in ("0.32", "0.33") and data["device"] == "cpu"
    rows = {(row["part"], row["variant"]): row for row in data["results"]}
    assert set(rows) == {
        ("gumbel", "fp32"),
        ("gumbel", "fp64"),
        ("topk_topp_seeded", "fp32"),
        ("topk_topp_seeded", "fp64"),
        ("rejection", "ngram"),
        ("rejection", "eagle"),
        ("ngram", "n=2-3"),
        ("flashinfer", "fp32"),
    }
    assert rows.pop(("flashinfer", "fp32"))["skipped"] == "FlashInfer needs a CUDA GPU"
    for key, row in rows.items():
        assert "error" not in row and "check_error" not in row, (key, row)
        assert len(row["plugin_us_samples"]) == len(row["upstream_us_samples"]) == 2
        assert row["ratio"] == row["upstream_us"] / row["plugin_us"]
        for name, value in row.items():
            if name.endswith(("_valid", "_in_top_k")):
                assert value in (True, 1.0), (key, name, value)
    assert "overhead_us" in rows[("topk_topp_seeded", "fp32")]
    # FP64: the plugin draws upstream's own noise stream, so the tokens agree.
    assert rows[("gumbel", "fp64")]["same_tokens_share"] == 1.0
    assert rows[("topk_topp_seeded", "fp64")]["same_tokens_share"] == 1.0
    # Temperature 1 and the same inputs: both verifiers accept by the same law.
    for variant in ("ngram", "eagle"):
        row = rows[("rejection", variant)]
        assert 1 <= row["plugin_mean_emitted"] <= 4 and 1 <= row["upstream_mean_emitted"] <= 4
    assert "| gumbel | fp32 | B=4 V=1024 |" in proc.stdout
    assert (tmp_path / "upstream.md").read_text() in proc.stdout
    assert set(upstream.parts_ratios(data)) == {
        parts.GUMBEL,
        parts.TOP_K_TOP_P_SEEDED,
        parts.REJECTION,
        parts.NGRAM,
    }


@pytest.mark.skipif(INSTALLED_LINE in ("0.32", "0.33"), reason="vLLM 0.32 or 0.33 is installed")
def test_on_a_line_without_upstreams_kernels_the_command_fails_in_one_line(tmp_path):
    proc = run_lab("upstream", "--device", "cpu", "--small",
                   "--out", str(tmp_path / "out"), env={"TRITON_INTERPRET": "1"})
    assert proc.returncode == 1
    assert last_line(proc.stderr) == (
        "bench upstream times the plugin against vLLM 0.32's and 0.33's own kernels, but "
        f"vLLM {INSTALLED_VERSION} is installed: install vLLM 0.32 or 0.33 "
        "(ci/constraints-0.32.txt), or on 0.20 run `python3 -m benchmarks sampler` "
        "(or topk_topp, rejection, ngram), which time stock vLLM 0.20"
    )
    assert not (tmp_path / "out").exists()


def test_a_failed_row_makes_the_command_fail(tmp_path, monkeypatch, capsys):
    def build_fails(variant, shape, device):
        raise ImportError("cannot import name 'Sampler'")

    part = upstream.Part("gumbel", parts.GUMBEL, lambda shapes: [("fp32", {"B": 4})], build_fails)
    monkeypatch.setattr(upstream, "PARTS", (part,))
    monkeypatch.setattr(upstream, "require_upstream_line", lambda version: None)
    monkeypatch.setattr(upstream, "prepare_cpu", lambda: None)
    status = upstream.main(["--device", "cpu", "--small", "--out", str(tmp_path)])
    assert status == 1
    assert capsys.readouterr().err == (
        "bench upstream: 1 of 1 rows failed (their ERROR notes above; --traceback prints where)\n"
    )


def test_ratios_of_a_malformed_report_is_a_one_line_usage_error(tmp_path, capsys):
    path = tmp_path / "upstream.json"
    path.write_text("{not json")
    with pytest.raises(SystemExit) as exit_info:
        upstream.main(["--ratios", str(path)])
    assert exit_info.value.code == 2
    assert last_line(capsys.readouterr().err).startswith(
        f"python3 -m benchmarks upstream: error: argument --ratios: cannot read the report {path}: "
    )


# verify_filtered: the plugin's folded verification against upstream's whole path.


def test_verify_filtered_full_cases_are_the_issues_shapes():
    """rows = B * (K + 1) in {1024, 2048, 4096} at K = 3 and 7, V = 151936,
    with and without draft logits; a plain run leaves the part out."""
    cases = upstream.verify_filtered_cases(upstream.FULL)
    rows = {(s["B"] * (s["K"] + 1), s["K"], s["V"]) for _, s in cases}
    assert rows == {(r, k, 151936) for r in (1024, 2048, 4096) for k in (3, 7)}
    assert {variant for variant, _ in cases} == {"ngram+topk_topp", "eagle+topk_topp"}
    assert "verify_filtered" not in upstream.parser().parse_args([]).parts
    assert upstream.parser().parse_args(["--parts", "verify_filtered"]).parts == [
        "verify_filtered"
    ]


def test_verify_processed_cases_are_the_ngram_half_of_verify_filtered():
    """The canvas route of batches with logits processors: n-gram drafts at
    verify_filtered's shapes, opt-in."""
    cases = upstream.verify_processed_cases(upstream.FULL)
    filtered = upstream.verify_filtered_cases(upstream.FULL)
    assert [shape for _, shape in cases] == [
        shape for variant, shape in filtered if variant == "ngram+topk_topp"
    ]
    assert {variant for variant, _ in cases} == {upstream.PROCESSED_VARIANT}
    assert "verify_processed" not in upstream.parser().parse_args([]).parts


def test_allocation_counter_tells_a_canvas_from_scratch(device):
    """The probe that fills ``<side>_alloc_scales_with_v``: a call that builds
    a [rows, V] float32 canvas scales with V, one that allocates per row does
    not, and views are not allocations."""
    logits = torch.randn(8, 64, device=device)

    def canvas(columns):
        return lambda: torch.empty_like(logits[:, :columns]).copy_(logits[:, :columns])

    def per_row(columns):
        return lambda: (logits[:, :columns][:, :3], torch.empty(8, device=device))

    fields = upstream.allocation_fields("x", canvas(64), canvas(32), lambda: None, 8, 64)
    assert fields["x_alloc_bytes"] == 8 * 64 * 4 and fields["x_alloc_scales_with_v"]
    assert fields["x_alloc_bytes_per_row_token"] == 4.0
    fields = upstream.allocation_fields("x", per_row(64), per_row(32), lambda: None, 8, 64)
    assert fields["x_alloc_bytes"] == 8 * 4 and not fields["x_alloc_scales_with_v"]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the interpreter's masked -inf arithmetic
def test_verify_filtered_plugin_side_runs_on_cpu_without_upstream(device):
    """The tiny configuration's plugin half (what needs no vLLM 0.33): valid
    tokens inside the top-k set, and per-call allocations that do not grow
    with V (the folded filters build no [rows, V] buffer)."""
    shape = upstream.verify_filtered_cases(upstream.SMALL)[0][1]
    for variant in ("ngram+topk_topp", "eagle+topk_topp"):
        pair = upstream.build_verify_filtered(variant, {**shape, "V": 256}, device)
        sampled, num_sampled = pair.plugin()
        assert sampled.shape == (shape["B"], shape["K"] + 1)
        assert ((num_sampled >= 1) & (num_sampled <= shape["K"] + 1)).all()
    from vllm_sampling_plugin.ops.rejection import rejection_sample_packed

    num_reqs, num_spec = shape["B"], shape["K"]
    rows = num_reqs * (num_spec + 1)
    target = torch.randn(rows, 512, device=device)

    def call(columns):
        return lambda: rejection_sample_packed(
            target[:, :columns],
            torch.zeros(rows, dtype=torch.int32, device=device),
            torch.arange(num_reqs + 1, dtype=torch.int32, device=device) * (num_spec + 1),
            torch.arange(num_reqs, dtype=torch.int32, device=device),
            torch.arange(rows, device=device),
            torch.ones(num_reqs, device=device),
            torch.arange(num_reqs, device=device),
            num_spec,
            apply_temperature=True,
            top_k=torch.full((num_reqs,), 5, dtype=torch.int32, device=device),
            top_p=torch.full((num_reqs,), 0.9, device=device),
        )

    fields = upstream.allocation_fields(
        "plugin", call(512), call(256), upstream.drop_plugin_workspaces, rows, 512
    )
    assert not fields["plugin_alloc_scales_with_v"]
    assert fields["plugin_alloc_bytes"] < rows * 512


@needs_vllm_line("0.32", "0.33")
def test_cpu_run_of_verify_processed_against_the_installed_line(tmp_path):
    """The canvas route on tiny shapes: both sides build upstream's tempered
    FP32 canvas (so both allocations grow with V), the plugin's side
    allocates no more than upstream's, and its tokens are inside the top-k
    set, as upstream's."""
    proc = run_module(
        "--device", "cpu", "--small", "--parts", "verify_processed", "--out", str(tmp_path),
        env={"TRITON_INTERPRET": "1"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-6000:]
    rows = json.loads((tmp_path / "upstream.json").read_text())["results"]
    assert [row["variant"] for row in rows] == [upstream.PROCESSED_VARIANT]
    for row in rows:
        assert "error" not in row and "check_error" not in row, row
        assert row["plugin_counts_valid"] and row["upstream_counts_valid"]
        assert row["plugin_in_top_k"] == row["upstream_in_top_k"] == 1.0
        assert row["plugin_alloc_scales_with_v"] and row["upstream_alloc_scales_with_v"]
        assert row["plugin_alloc_bytes"] <= row["upstream_alloc_bytes"], row


@needs_vllm_line("0.32", "0.33")
def test_cpu_run_of_verify_filtered_against_the_installed_line(tmp_path):
    """The command the GPU session runs, on tiny shapes: both sides called,
    their tokens valid and inside the top-k set, the allocation fields there
    (upstream's canvas grows with V, the plugin's calls do not)."""
    proc = run_module(
        "--device", "cpu", "--small", "--parts", "verify_filtered", "--out", str(tmp_path),
        env={"TRITON_INTERPRET": "1"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-6000:]
    data = json.loads((tmp_path / "upstream.json").read_text())
    rows = data["results"]
    assert {row["variant"] for row in rows} == {"ngram+topk_topp", "eagle+topk_topp"}
    for row in rows:
        assert "error" not in row and "check_error" not in row, row
        assert row["plugin_counts_valid"] and row["upstream_counts_valid"]
        assert row["plugin_in_top_k"] == row["upstream_in_top_k"] == 1.0
        assert row["upstream_alloc_scales_with_v"] and not row["plugin_alloc_scales_with_v"]
