"""scripts/gpu-034-measure.sh with ``python3`` a stand-in: each mode's bench
e2e command parses and asks for what docs/gpu-staging.md says it measures."""

import subprocess
from pathlib import Path

import pytest

from benchmarks.e2e import run
from tests.benchmarks.test_gpu_check import e2e_commands, stand_in_python
from tests.scripts_dir import SCRIPTS


def measure(tmp_path: Path, mode: str, **env: str) -> tuple[subprocess.CompletedProcess, list]:
    """The script after a staging's last call (its ``env.sh`` in a site
    folder of its own), ``python3`` a stand-in; the bench e2e commands it
    ran, parsed."""
    bin_dir = stand_in_python(tmp_path)
    site = tmp_path / "site"
    site.mkdir()
    (site / "env.sh").write_text(f"export PYTHONPATH={site}\n")
    (tmp_path / "out").mkdir()
    proc = subprocess.run(
        ["bash", str(SCRIPTS / "gpu-034-measure.sh"), mode],
        env={"PATH": f"{bin_dir}:/usr/bin:/bin", "OUT": str(tmp_path / "out"),
             "WORK": str(tmp_path / "work"), "VLLM_SITE": str(site), "STEP_TIMEOUT": "60",
             **env},
        cwd=SCRIPTS.parent, capture_output=True, text=True, timeout=120)
    return proc, [run.parse_args(argv) for argv in e2e_commands(tmp_path)]


@pytest.fixture(autouse=True)
def vllm_0_34(monkeypatch):
    monkeypatch.setattr(run, "installed_vllm_version", lambda: "0.34.0")


def test_spec_measures_each_method_with_three_engines_that_fit_an_h100(tmp_path):
    proc, e2e = measure(tmp_path, "spec", SPEC_METHODS="suffix ngram")
    assert proc.returncode == 0, proc.stderr
    assert [a.ngram_method for a in e2e] == ["suffix", "ngram"]
    assert all(a.start_together and a.kv_cache_gib == 5.5 and a.spec_against_stock
               and a.spec_workloads == ["nonrepeating", "accepting"] for a in e2e)
    assert (tmp_path / "out" / "info.txt").exists()


def test_sampling_measures_top_k_top_p_and_seeded_top_p_without_speculation(tmp_path):
    proc, e2e = measure(tmp_path, "sampling")
    assert proc.returncode == 0, proc.stderr
    [args] = e2e
    assert args.mixes == ["topk_topp", "seeded_topp"] and args.max_num_seqs == [64, 256]
    assert args.models == [("8b", 151936)]


def test_trace_replays_the_named_workload(tmp_path):
    work = tmp_path / "work" / "workloads"
    work.mkdir(parents=True)
    (work / "stats.json").write_text("{}")
    (work / "chat.jsonl").write_text('{"prompt_token_ids": [1], "trace_token_ids": [2]}\n')
    proc, e2e = measure(tmp_path, "trace", TRACE_WORKLOADS=":chat")
    assert proc.returncode == 0, proc.stderr
    [args] = e2e
    assert args.ngram_method == "suffix" and args.trace_workloads == (str(work), ["chat"])


def test_without_a_staging_nothing_runs(tmp_path):
    (tmp_path / "gone").mkdir()
    proc, e2e = measure(tmp_path, "spec", VLLM_SITE=str(tmp_path / "gone"))
    assert proc.returncode == 1 and "stage vLLM 0.34 first" in proc.stdout and e2e == []


def test_an_unknown_mode_is_refused(tmp_path):
    proc, e2e = measure(tmp_path, "everything")
    assert proc.returncode == 2 and "usage" in proc.stderr and e2e == []
