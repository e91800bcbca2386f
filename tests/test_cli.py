"""The ``vllm-sampling-plugin`` command."""

import subprocess
import sys

import pytest

from tests.vllm_lines import needs_vllm_line


def run_cli(*args, env=None):
    import os

    full_env = {**os.environ, "VLLM_LOGGING_LEVEL": "ERROR", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "vllm_sampling_plugin.cli", *args],
        capture_output=True, text=True, env=full_env, timeout=300,
    )


@needs_vllm_line("0.20")
def test_info_reports_versions_registration_and_settings():
    proc = run_cli("info", env={"VLLM_USE_FLASHINFER_SAMPLER": "0"})
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for name in ("vllm ", "torch ", "triton ", "flashinfer-python "):
        assert name in out
    assert "registered and active" in out
    assert "use_fp64_gumbel" in out
    assert "VLLM_USE_FLASHINFER_SAMPLER  0" in out
    assert "not used" in out and "VLLM_USE_FLASHINFER_SAMPLER=0" in out


def test_info_flags_a_malformed_flashinfer_value():
    proc = run_cli("info", env={"VLLM_USE_FLASHINFER_SAMPLER": "yes"})
    assert proc.returncode == 1
    assert "INVALID" in proc.stdout and "'yes'" in proc.stdout


def test_info_says_when_vllm_plugins_filters_it_out():
    proc = run_cli("info", env={"VLLM_PLUGINS": "something_else"})
    assert "filtered out by VLLM_PLUGINS" in proc.stdout


@pytest.mark.parametrize("command", [["bench"], ["bench", "nope"]])
def test_bench_needs_a_known_area(command):
    proc = run_cli(*command)
    assert proc.returncode == 2
    assert "sampler" in proc.stderr


def test_demo_samples_valid_tokens():
    proc = run_cli("demo")
    assert proc.returncode == 0, proc.stderr
    import json

    import torch

    tokens = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(tokens) == 4 and all(0 <= t < 64 for t in tokens)
    # Row 0 is greedy over the demo's logits (torch.randn with seed 0).
    logits = torch.randn(4, 64, generator=torch.Generator().manual_seed(0))
    assert tokens[0] == int(logits[0].argmax())


def test_info_says_active_and_prints_the_parts_of_the_installed_line():
    """What the seams' adapters find here is LINE_SEAMS's row for this line,
    and info shows it (the registration-and-seams smoke of every CI line)."""
    from tests.vllm_lines import INSTALLED_LINE
    from vllm_sampling_plugin.integration.parts import line_found, parts_rows

    proc = run_cli("info")
    assert proc.returncode in (0, 1), proc.stderr
    assert "registered and active" in proc.stdout
    assert f"parts on vLLM {INSTALLED_LINE}.x" in proc.stdout
    for part, owner, _, ratio in parts_rows(line_found(INSTALLED_LINE), INSTALLED_LINE):
        assert f"  {part}: {owner};" in proc.stdout
        assert ratio in proc.stdout


def test_info_markdown_renders_the_compatibility_table():
    proc = run_cli("info", "--markdown")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("| vLLM | draw shape | plugin owns |")
