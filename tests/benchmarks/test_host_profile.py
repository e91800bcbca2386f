"""scripts/host_profile.py on a CPU: py-spy's raw stacks split by engine
core, kept inside the step, and compared per step."""

import json
from pathlib import Path

from tests.scripts_dir import load_script

def load():
    return load_script("host_profile")


ROOT = 'process 10:"python3 spec_step_breakdown.py"'


def _line(pid: int, frames: list[str], n: int) -> str:
    core = f'process {pid}:"VLLM::EngineCore"'
    spawn = 'process 11:"python3 -c from multiprocessing.spawn import spawn_main; spawn_main()"'
    return ";".join([ROOT, spawn, core, *frames]) + f" {n}\n"


LOOP = "EngineCore.run_busy_loop (vllm/v1/engine/core.py:900)"
STEP = "EngineCore.step_with_batch_queue (vllm/v1/engine/core.py:700)"
SCHED = "Scheduler.schedule (vllm/v1/core/sched/scheduler.py:400)"
SAMPLE = "GPUModelRunner.sample_tokens (vllm/v1/worker/gpu/model_runner.py:2150)"
PROPOSE = "NgramGPUSpeculator.propose (vllm/v1/worker/gpu/spec_decode/ngram/speculator.py:220)"
WAIT = "Queue.get (queue.py:180)"


def write_profile(tmp_path: Path) -> tuple[Path, Path]:
    raw = tmp_path / "stacks.txt"
    raw.write_text("".join([
        _line(20, [LOOP, STEP, SCHED], 100),
        _line(20, [LOOP, STEP, SAMPLE], 200),
        _line(20, [LOOP, WAIT], 999),  # idle between requests: not a step
        _line(30, [LOOP, STEP, SCHED], 150),
        _line(30, [LOOP, STEP, SAMPLE], 200),
        _line(30, [LOOP, STEP, SAMPLE, PROPOSE], 100),
        f"{ROOT};main (spec_step_breakdown.py:120) 50\n",
    ]))
    breakdown = tmp_path / "spec_step_breakdown.json"
    breakdown.write_text(json.dumps({"engines": {
        "none": {"engine_core_pid": 20, "steps": 50, "runs_profiled": 2},
        "adaptive": {"engine_core_pid": 30, "steps": 50, "runs_profiled": 2},
    }}))
    return raw, breakdown


def test_summary_keeps_one_engine_cores_step(tmp_path):
    raw, _ = write_profile(tmp_path)
    summary = load().summarise(str(raw), 30, rate=100.0)
    assert summary["step_s"] == 4.5
    inclusive = summary["inclusive_s"]
    assert inclusive["GPUModelRunner.sample_tokens (model_runner.py)"] == 3.0
    assert inclusive["NgramGPUSpeculator.propose (speculator.py)"] == 1.0
    assert summary["self_s"]["GPUModelRunner.sample_tokens (model_runner.py)"] == 2.0
    assert "Queue.get (queue.py)" not in inclusive


def test_cli_compares_ms_per_step(tmp_path, capsys):
    raw, breakdown = write_profile(tmp_path)
    assert load().main([str(raw), str(breakdown), "100"]) == 0
    result = json.loads((tmp_path / "host_profile.json").read_text())
    rows = {row[0]: row[1:] for row in result["compare"]["inclusive_s"]}
    # 100 steps per engine: propose adds 1 s / 100 steps = 10 ms a step.
    assert rows["NgramGPUSpeculator.propose (speculator.py)"] == [0.0, 10.0, 10.0]
    assert rows["Scheduler.schedule (scheduler.py)"] == [10.0, 15.0, 5.0]
    assert "none -> adaptive" in capsys.readouterr().out
