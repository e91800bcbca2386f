"""scripts/stage-vllm-newer.sh: a staging that cannot build FlashInfer's
sampling module stops before it resolves anything, rather than sending chunks
without it (stock engines would then compile it on the GPU machine for
minutes)."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.scripts_dir import SCRIPTS

# What the script runs before its nvcc check; PATH holds only these, so the
# test sees no nvcc wherever the machine keeps one.
TOOLS = ("bash", "git", "dirname", "cut", "mkdir", "grep", "cat")


def staging_without_nvcc(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(SCRIPTS / "stage-vllm-newer.sh", repo / "scripts")
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    tools = tmp_path / "bin"
    tools.mkdir()
    for tool in TOOLS:
        (tools / tool).symlink_to(shutil.which(tool))
    return subprocess.run(["bash", "scripts/stage-vllm-newer.sh", "0.34.0"], cwd=repo,
                          env={"PATH": str(tools), "HOME": os.environ.get("HOME", "/"), **env},
                          capture_output=True, text=True, timeout=60)


@pytest.mark.skipif(any(shutil.which(t) is None for t in TOOLS), reason="a shell tool is missing")
def test_no_nvcc_stops_the_staging_and_says_how_to_go_without(tmp_path):
    stopped = staging_without_nvcc(tmp_path)
    assert stopped.returncode == 1
    assert "STOP: no nvcc here to build FlashInfer's sampling module" in stopped.stderr
    assert "STAGE_FLASHINFER_AOT=0" in stopped.stderr
    assert "[stage] resolving" not in stopped.stdout
    assert not (tmp_path / "repo" / ".device").exists()
