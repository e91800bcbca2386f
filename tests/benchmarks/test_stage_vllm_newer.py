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
TOOLS = ("bash", "git", "dirname", "cut", "mkdir", "grep", "cat", "xargs", "stat", "awk")


def stage_in_an_empty_repo(tmp_path: Path, first_on_path: Path | None = None,
                         **env: str) -> subprocess.CompletedProcess:
    """The staging of 0.34.0 in an empty repository, with only TOOLS on PATH
    (after ``first_on_path``, where a test puts stand-ins)."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(SCRIPTS / "stage-vllm-newer.sh", repo / "scripts")
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    tools = tmp_path / "bin"
    tools.mkdir()
    for tool in TOOLS:
        (tools / tool).symlink_to(shutil.which(tool))
    path = f"{first_on_path}{os.pathsep}{tools}" if first_on_path else str(tools)
    return subprocess.run(["bash", "scripts/stage-vllm-newer.sh", "0.34.0"], cwd=repo,
                          env={"PATH": path, "HOME": os.environ.get("HOME", "/"), **env},
                          capture_output=True, text=True, timeout=60)


@pytest.mark.skipif(any(shutil.which(t) is None for t in TOOLS), reason="a shell tool is missing")
def test_no_nvcc_stops_the_staging_and_says_how_to_go_without(tmp_path):
    stopped = stage_in_an_empty_repo(tmp_path)
    assert stopped.returncode == 1
    assert "STOP: no nvcc here to build FlashInfer's sampling module" in stopped.stderr
    assert "STAGE_FLASHINFER_AOT=0" in stopped.stderr
    assert "[stage] resolving" not in stopped.stdout
    assert not (tmp_path / "repo" / ".device").exists()


@pytest.mark.skipif(any(shutil.which(t) is None for t in TOOLS), reason="a shell tool is missing")
def test_no_torch_for_flashinfers_import_stops_before_the_downloads(tmp_path):
    """A fresh machine before the README's set-up: nvcc is there, but the
    python3 that would import FlashInfer for the build has no torch."""
    fakes = tmp_path / "fakes"
    fakes.mkdir()
    for name, body in (("nvcc", "exit 0"), ("python3", "exit 1")):
        (fakes / name).write_text(f"#!/bin/sh\n{body}\n")
        (fakes / name).chmod(0o755)
    stopped = stage_in_an_empty_repo(tmp_path, first_on_path=fakes)
    assert stopped.returncode == 1
    assert "STOP: python3 here has no torch" in stopped.stderr
    assert "STAGE_FLASHINFER_AOT=0" in stopped.stderr
    assert "[stage] resolving" not in stopped.stdout
