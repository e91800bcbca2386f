"""scripts/device-step-newer.sh, the GPU machine's side of a newer line's
staging: it keeps one carried chunk per call, and the call that chains the
work (``--last``) stops where chunks are missing."""

import shutil
import subprocess
import uuid
from pathlib import Path

from tests.scripts_dir import SCRIPTS


def stage(root: Path, chunks: int) -> tuple[Path, str]:
    """A staging of ``chunks`` chunks under ``root/.device/<tag>`` with only
    ``c_00`` present, as the first call carries it; returns (script, tag)."""
    tag = f"vtest{uuid.uuid4().hex[:8]}"
    tools = root / ".device" / tag / "tools"
    tools.mkdir(parents=True)
    shutil.copy(SCRIPTS / "device-step-newer.sh", tools)
    (tools / "version").write_text("0.99.0\n")
    (tools / "count").write_text(f"{chunks}\n")
    (root / ".device" / tag / "c_00").mkdir()
    (root / ".device" / tag / "c_00" / "part_00").write_text("x")
    return tools / "device-step-newer.sh", tag


def step(root: Path, script: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(script), *args], cwd=root, capture_output=True,
                          text=True, timeout=60)


def test_a_missing_chunk_stops_only_the_last_call(tmp_path):
    script, tag = stage(tmp_path, chunks=2)
    try:
        middle = step(tmp_path, script)
        assert middle.returncode == 0
        assert "have 1 of 2 chunks; carry the next one" in middle.stdout
        last = step(tmp_path, script, "--last")
        assert last.returncode == 4
        assert "STOP: --last, but only 1 of 2 chunks are here" in last.stdout
    finally:
        shutil.rmtree(f"/tmp/vllm-{tag}-chunks", ignore_errors=True)
