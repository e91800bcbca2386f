"""scripts/gpu-check.sh runs every step it is given and then says, by its
exit status and one line, which of them failed."""

import subprocess
import time
from pathlib import Path

from tests.scripts_dir import SCRIPTS


def stand_in_python(tmp_path: Path, python_exit: int = 0) -> Path:
    """A folder to put first on PATH whose ``python3`` exits ``python_exit``
    and appends its arguments to ``tmp_path / "python3-calls"``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(f'#!/bin/sh\necho stand-in\n'
                                     f'echo "$*" >> {tmp_path}/python3-calls\n'
                                     f"exit {python_exit}\n")
    (bin_dir / "python3").chmod(0o755)
    return bin_dir


def e2e_commands(tmp_path: Path) -> list[list[str]]:
    """The arguments after ``-m benchmarks e2e`` of every bench e2e command
    the stand-in ``python3`` (:func:`stand_in_python`) was asked to run."""
    calls = tmp_path / "python3-calls"
    lines = calls.read_text().splitlines() if calls.exists() else []
    return [line.split()[3:] for line in lines if line.startswith("-m benchmarks e2e")]


def gpu_check(tmp_path: Path, *steps: str, python_exit: int = 0) -> subprocess.CompletedProcess:
    """The script with ``python3`` a stand-in (:func:`stand_in_python`):
    nothing of a step runs, on a machine with a GPU or without."""
    bin_dir = stand_in_python(tmp_path, python_exit)
    return subprocess.run(["bash", str(SCRIPTS / "gpu-check.sh"), *steps],
                          env={"PATH": f"{bin_dir}:/usr/bin:/bin", "OUT": str(tmp_path / "out"),
                               "STEP_TIMEOUT": "60"},
                          cwd=SCRIPTS.parent, capture_output=True, text=True, timeout=120)


def test_a_failed_step_fails_the_script_after_the_others_ran(tmp_path):
    proc = gpu_check(tmp_path, "no-such-step", "e2e-spec-1b", "bench-ngram", python_exit=3)
    assert proc.returncode == 1
    assert "=== e2e-spec-1b rc=3" in proc.stdout and "=== bench-ngram rc=3" in proc.stdout
    assert proc.stdout.rstrip().splitlines()[-1] == (
        "=== failed: no-such-step: unknown step; e2e-spec-1b rc=3; bench-ngram rc=3 "
        f"(logs in {tmp_path / 'out'})")


def test_steps_that_pass_exit_zero(tmp_path):
    proc = gpu_check(tmp_path, "e2e-spec-1b", "bench-ngram")
    assert proc.returncode == 0
    assert "=== e2e-spec-1b rc=0" in proc.stdout and "failed" not in proc.stdout


def test_steps_with_stock_engines_on_newer_lines_build_flashinfer_sampling_once(tmp_path):
    """e2e-vs-stock and e2e-spec-stock start one background build of
    FlashInfer's sampling module between them (the stand-in ``python3`` is
    the build here); a step without stock engines starts none."""
    proc = gpu_check(tmp_path, "e2e-vs-stock", "e2e-spec-stock")
    assert proc.returncode == 0
    log = tmp_path / "out" / "flashinfer-sampling-build.log"
    deadline = time.monotonic() + 30
    while "built or loaded" not in (log.read_text() if log.exists() else ""):
        assert time.monotonic() < deadline, "no build line within 30 s"
        time.sleep(0.1)
    assert "built or loaded (rc=0)" in log.read_text()
    calls = (tmp_path / "python3-calls").read_text().splitlines()
    assert sum("get_sampling_module" in c for c in calls) == 1
    quiet = tmp_path / "quiet"
    quiet.mkdir()
    assert gpu_check(quiet, "e2e-spec-1b").returncode == 0
    time.sleep(0.5)
    assert not (quiet / "out" / "flashinfer-sampling-build.log").exists()
