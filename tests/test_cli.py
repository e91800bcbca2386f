"""The ``vllm-sampling-plugin`` command."""

import os
import subprocess

import pytest

from tests.commands import CLI, environment, run_cli
from tests.vllm_lines import needs_vllm_line
from vllm_sampling_plugin import __version__


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


def test_version():
    proc = run_cli("--version")
    assert (proc.returncode, proc.stdout) == (0, f"vllm-sampling-plugin {__version__}\n")


def test_output_into_a_closed_pipe_ends_quietly_with_sigpipes_status():
    # `vllm-sampling-plugin info --markdown | head -1`, with the reader gone
    # before the first write so that the outcome does not depend on timing.
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run([*CLI, "info", "--markdown"], stdout=write_end,
                              stderr=subprocess.PIPE, text=True, env=environment(), timeout=300)
    finally:
        os.close(write_end)
    assert proc.returncode == 141, proc.stderr
    assert "Traceback" not in proc.stderr and "BrokenPipeError" not in proc.stderr


def test_info_with_the_flashinfer_variable_unset_warns_of_nothing():
    proc = run_cli("info", env={"VLLM_USE_FLASHINFER_SAMPLER": None})
    assert proc.returncode == 0, proc.stderr
    assert "VLLM_USE_FLASHINFER_SAMPLER  unset" in proc.stdout
    assert "warning" not in proc.stdout.lower()


@pytest.mark.parametrize("lab_command", ["bench", "soak"])
def test_the_lab_is_not_a_command_of_the_installed_plugin(lab_command):
    """Benchmarks and soak live in the checkout (python3 -m benchmarks), not the wheel."""
    proc = run_cli(lab_command, "--help")
    assert proc.returncode == 2
    assert f"invalid choice: '{lab_command}'" in proc.stderr
