"""scripts/spec_step_breakdown.py on a CPU: its arguments, its one-line
refusal without a GPU, and the arithmetic of its per-step figures."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.scripts_dir import load_script

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "spec_step_breakdown.py"


def load():
    return load_script("spec_step_breakdown")


def test_defaults_are_the_issue_shape():
    args = load().parse_args(["--out", "x"])
    assert (args.max_num_seqs, args.requests, args.prompt_len, args.output_len) == (64, 256, 64, 256)
    assert args.runs == 3 and args.gpu_memory_utilization == 0.42
    assert (args.workload, args.baseline) == ("nonrepeating", "none")


def test_the_baseline_engine_is_none_or_fixed_k_with_the_same_graphs():
    """--baseline fixed compares adaptive with fixed k on equal terms: the same
    k and CUDA-graph sizes, only the policy differs."""
    module = load()
    for baseline in ("none", "fixed"):
        args = module.parse_args(["--out", "x", "--baseline", baseline,
                                  "--workload", "accepting"])
        specs = module.engine_specs(args, "/ckpt")
        assert list(specs) == [baseline, "adaptive"]
        adaptive = specs["adaptive"]
        assert (adaptive.ngram_k, adaptive.speculation_policy) == (module.K, "adaptive")
        base = specs[baseline]
        if baseline == "none":
            assert base.ngram_k == 0
        else:
            assert base.speculation_policy == "fixed"
            assert (base.ngram_k, base.max_cudagraph_capture_size) == (
                adaptive.ngram_k, adaptive.max_cudagraph_capture_size)
    with pytest.raises(SystemExit):
        module.parse_args(["--out", "x", "--baseline", "adaptive"])


def test_the_adaptive_engine_can_start_first():
    """--adaptive-first swaps the start order only (the engines' settings stay)."""
    module = load()
    args = module.parse_args(["--out", "x", "--baseline", "fixed"])
    first = module.parse_args(["--out", "x", "--baseline", "fixed", "--adaptive-first"])
    specs, swapped = module.engine_specs(args, "/ckpt"), module.engine_specs(first, "/ckpt")
    assert list(swapped) == ["adaptive", "fixed"] and swapped == specs


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without a GPU")
def test_refuses_without_gpu_in_one_line(tmp_path):
    proc = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines()[-1].startswith(
        "the spec_step_breakdown benchmark needs a CUDA GPU")
    assert not list(tmp_path.iterdir())


def test_launches_per_step_cancel_prefill_and_drain():
    short = {"steps": 10, "launches": {"cudaLaunchKernel": 100, "cudaGraphLaunch": 8}}
    long = {"steps": 30, "launches": {"cudaLaunchKernel": 300, "cudaGraphLaunch": 28,
                                      "cuLaunchKernel": 40}}
    assert load().launches_per_step(short, long) == {
        "steps": 20, "total": 13.0, "cuLaunchKernel": 2.0, "cudaGraphLaunch": 1.0,
        "cudaLaunchKernel": 10.0}


def test_step_summary_splits_host_time():
    summary = load().step_summary({
        "host_ms": [3.0, 5.0], "execute_host_ms": [2.0, 3.0], "period_ms": [4.0],
        "step_gpu_ms": [1.0, 2.0], "graph_modes": {"FULL/1": 2},
        "run": {"tok_s": 9.0, "tokens": 7}, "spec": {"drafted": 3}})
    assert summary == {"steps": 2, "tokens_per_step": 3.5, "wall_ms_per_step": 4.0,
                       "execute_model_host_ms": 2.5, "sample_tokens_host_ms": 1.5,
                       "gpu_ms_per_step": 1.5, "graph_modes": {"FULL/1": 2},
                       "instrumented_tok_s": 9.0, "instrumented_spec": {"drafted": 3}}


def test_calls_per_step_and_their_difference(capsys):
    module = load()
    short = {"steps": 10, "calls": {"aten::fill_": [10, 1.0], "aten::index": [4, 0.4]}}
    long = {"steps": 30, "calls": {"aten::fill_": [50, 5.0], "aten::index": [4, 0.4],
                                   "aten::index_put_": [20, 2.0]}}
    adaptive = module.calls_per_step(short, long)
    assert adaptive == {"aten::fill_": [2.0, 200.0], "aten::index": [0.0, 0.0],
                        "aten::index_put_": [1.0, 100.0]}
    none = {"aten::fill_": [1.0, 90.0]}
    module.print_call_differences({"none": {"calls_per_decode_step": none},
                                   "adaptive": {"calls_per_decode_step": adaptive}}, "none")
    lines = capsys.readouterr().out.splitlines()[1:]
    # Largest count difference first, equal ones by name; a call of equal
    # count in both engines is left out.
    assert [line.split()[-1] for line in lines] == ["aten::fill_", "aten::index_put_"]
    assert lines[0].split()[:2] == ["+1.00", "+110.0"]
    assert lines[1].split()[:2] == ["+1.00", "+100.0"]
