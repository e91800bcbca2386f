"""scripts/gpu-background.sh (a plan that outlives its device call) and
scripts/gpu-034-trace-plan.sh (issue 63's cells a step each), run here with
plans of a few lines and ``python3`` a stand-in."""

import subprocess
import tarfile
from pathlib import Path

import pytest

from benchmarks.e2e import run
from tests.benchmarks.test_gpu_check import e2e_commands, stand_in_python
from tests.scripts_dir import SCRIPTS


def background(tmp_path: Path, *args: str, path: str = "/usr/bin:/bin",
               **env: str) -> subprocess.CompletedProcess:
    (tmp_path / "out").mkdir(exist_ok=True)
    return subprocess.run(
        ["bash", str(SCRIPTS / "gpu-background.sh"), *args],
        env={"PATH": path, "OUT": str(tmp_path / "out"),
             "GPU_PLAN_ROOT": str(tmp_path / "plan"), **env},
        cwd=SCRIPTS.parent, capture_output=True, text=True, timeout=120)


def packed(tmp_path: Path) -> dict[str, str]:
    with tarfile.open(tmp_path / "out" / "plan.tgz") as tar:
        return {m.name.removeprefix("./"): tar.extractfile(m).read().decode()
                for m in tar.getmembers() if m.isfile()}


def test_the_plan_runs_on_after_start_returns_and_wait_brings_back_what_it_wrote(tmp_path):
    gate = tmp_path / "gate"
    plan = tmp_path / "plan.sh"
    plan.write_text('mkdir -p "$PLAN_OUT/step"; echo "$1" > "$PLAN_OUT/step/first.json"\n'
                    # Bounded, so that a failing test leaves no plan behind for long.
                    f'for i in $(seq 300); do [ -e {gate} ] && break; sleep 0.2; done\n'
                    'echo done > "$PLAN_OUT/step/second.json"; echo "second step"; exit 7\n')
    started = background(tmp_path, "start", str(plan), "cell-A")
    try:
        assert started.returncode == 0 and "plan started" in started.stdout
        second = background(tmp_path, "start", str(plan), "cell-B")
        assert second.returncode == 4 and "still running" in second.stderr
        waiting = background(tmp_path, "wait", "1")
        assert "still running after 1 s" in waiting.stdout
        assert packed(tmp_path) == {"step/first.json": "cell-A\n"}
    finally:
        gate.touch()
    ended = background(tmp_path, "wait", "60")
    assert "second step" in ended.stdout and "plan ended, exit status 7" in ended.stdout
    assert packed(tmp_path) == {"step/first.json": "cell-A\n", "step/second.json": "done\n"}


def test_wait_without_a_started_plan_says_so(tmp_path):
    proc = background(tmp_path, "wait", "1")
    assert proc.returncode == 3 and "no plan was started" in proc.stderr


@pytest.mark.parametrize("args", [[], ["start"], ["everything"]])
def test_a_call_without_a_plan_is_refused(tmp_path, args):
    proc = background(tmp_path, *args)
    assert proc.returncode == 2 and "usage" in proc.stderr


@pytest.fixture
def vllm_0_34(monkeypatch):
    monkeypatch.setattr(run, "installed_vllm_version", lambda: "0.34.0")


def trace_plan(tmp_path: Path, *steps: str, gpu_mib: int | None = None) -> list:
    """The trace plan through start and wait, ``python3`` a stand-in (and
    ``nvidia-smi`` one reporting ``gpu_mib``); the bench e2e commands it ran."""
    workloads = tmp_path / "workloads"
    workloads.mkdir()
    (workloads / "stats.json").write_text("{}")
    for name in ("agentic", "code-edit"):
        (workloads / f"{name}.jsonl").write_text(
            '{"prompt_token_ids": [1], "trace_token_ids": [2]}\n')
    site = tmp_path / "site"
    site.mkdir()
    (site / "env.sh").write_text(f"export PYTHONPATH={site}\n")
    bin_dir = stand_in_python(tmp_path)
    if gpu_mib is not None:
        (bin_dir / "nvidia-smi").write_text(f"#!/bin/sh\necho {gpu_mib}\n")
        (bin_dir / "nvidia-smi").chmod(0o755)
    env = {"WORKLOADS": str(workloads), "PLAN_WORK": str(tmp_path / "work"),
           "VLLM_SITE": str(site)}
    background(tmp_path, "start", str(SCRIPTS / "gpu-034-trace-plan.sh"), *steps,
               path=f"{bin_dir}:/usr/bin:/bin", **env)
    ended = background(tmp_path, "wait", "60")
    assert "plan ended, exit status 0" in ended.stdout
    return [run.parse_args(argv) for argv in e2e_commands(tmp_path)]


def test_the_trace_plan_measures_each_step_in_a_folder_of_its_own(tmp_path, vllm_0_34):
    e2e = trace_plan(tmp_path, "agentic:suffix:120:16,64:11", "code-edit:ngram:90:1,16:4",
                     gpu_mib=81559)
    assert [(a.ngram_method, a.trace_workloads, a.max_num_seqs, a.kv_cache_gib, a.time_budget)
            for a in e2e] == [
        ("suffix", (str(tmp_path / "work" / "agentic-suffix" / "workloads"), ["agentic"]),
         [16, 64], 11.0, 60),
        ("ngram", (str(tmp_path / "work" / "code-edit-ngram" / "workloads"), ["code-edit"]),
         [1, 16], 4.0, 30)]
    assert all(a.requests_per_seq == 1 and a.control and not a.control_alongside for a in e2e)
    files = packed(tmp_path)
    assert {"agentic-suffix/info.txt", "code-edit-ngram/info.txt"} <= set(files)
    # The step's log, linked while it runs, travels with every wait.
    assert "stand-in" in files["code-edit-ngram/in-flight.log"]


def test_one_step_serves_several_workloads_from_one_set_of_engines(tmp_path, vllm_0_34):
    [args] = trace_plan(tmp_path, "code-edit,agentic:ngram:120:1,16,64")
    folder = tmp_path / "work" / "code-edit+agentic-ngram" / "workloads"
    assert args.trace_workloads == (str(folder), ["code-edit", "agentic"])
    assert sorted(p.name for p in folder.iterdir()) == [
        "agentic.jsonl", "code-edit.jsonl", "stats.json"]
    assert args.max_num_seqs == [1, 16, 64]


@pytest.mark.parametrize("gpu_mib, alongside", [(143771, True), (81559, False)])
def test_the_twin_runs_alongside_where_three_engines_fit(tmp_path, vllm_0_34, gpu_mib, alongside):
    [args] = trace_plan(tmp_path, "agentic:suffix:120", gpu_mib=gpu_mib)
    assert args.control and args.control_alongside == alongside
    assert args.max_num_seqs == [16, 64] and args.kv_cache_gib == 11.0


def test_the_trace_plan_stops_at_a_workload_it_was_not_given(tmp_path):
    (tmp_path / "workloads").mkdir()
    bin_dir = stand_in_python(tmp_path)
    background(tmp_path, "start", str(SCRIPTS / "gpu-034-trace-plan.sh"), "chat:ngram:60",
               path=f"{bin_dir}:/usr/bin:/bin", WORKLOADS=str(tmp_path / "workloads"),
               PLAN_WORK=str(tmp_path / "work"))
    ended = background(tmp_path, "wait", "60")
    assert "plan ended, exit status 1" in ended.stdout
    assert not (tmp_path / "python3-calls").exists()
