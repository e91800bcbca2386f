"""The ``vllm-sampling-plugin`` command.

What a user meets (issue 61 items 4, 5 and 9; issue 60's one-screen
``info``) runs through the console script as pip writes it
(:func:`console_script`), in a plain new process: exit status, what reaches
stdout and what reaches stderr. The rest runs through ``run_cli`` (a forked
interpreter, faster).
"""

import json
import os
import re
import subprocess
import sys
import tomllib

import pytest

from tests.commands import environment, last_line, run_cli
from tests.integration.helpers import REPO_ROOT
from tests.vllm_lines import needs_vllm_line
from vllm_sampling_plugin import __version__, config

# issue 60: `info` is one screen.
INFO_MAX_LINES = 30
INFO_MAX_WIDTH = 200
# A line of vLLM's logger: "INFO 12-06 15:30:01 [file.py:12] ...".
VLLM_LOG_LINE = re.compile(r"^(DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d ")


def console_script() -> list[str]:
    """``vllm-sampling-plugin`` as pip's generated script runs it: import the
    ``[project.scripts]`` entry point's module, ``sys.exit(function())``."""
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    module, function = pyproject["project"]["scripts"]["vllm-sampling-plugin"].split(":")
    return [sys.executable, "-c",
            f"import sys; from {module} import {function}; sys.exit({function}())"]


def run_script(*args: str, env: dict[str, str | None] | None = None,
               stdout=subprocess.PIPE) -> subprocess.CompletedProcess:
    """The console script in a new process, with vLLM's default log level
    (INFO: the lines a user sees), not the tests' quieter one."""
    return subprocess.run([*console_script(), *args], stdout=stdout, stderr=subprocess.PIPE,
                          text=True, cwd=REPO_ROOT, timeout=300,
                          env=environment({"VLLM_LOGGING_LEVEL": None, **(env or {})}))


@needs_vllm_line("0.20")
def test_info_is_one_screen_that_starts_with_the_plugins_line():
    """Item 4 and issue 60: the first line is the plugin's (name, version,
    vLLM's, active and why); vLLM's log lines go to stderr."""
    proc = run_script("info", env={"VLLM_USE_FLASHINFER_SAMPLER": "0"})
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith(f"vllm-sampling-plugin {__version__}, vLLM 0.20.")
    assert ": active (vLLM loads it in every process)" in lines[0]
    assert len(lines) <= INFO_MAX_LINES
    assert max(len(line) for line in lines) <= INFO_MAX_WIDTH
    assert not [line for line in lines if VLLM_LOG_LINE.match(line)]
    # vLLM did log (its plugin loader at INFO): on stderr.
    assert any(VLLM_LOG_LINE.match(line) for line in proc.stderr.splitlines()), proc.stderr


@needs_vllm_line("0.20")
def test_info_into_head_ends_quietly():
    """Item 4: `info | head -1` prints the plugin's line, and nothing
    complains on stderr."""
    script = " ".join(f"'{part}'" for part in console_script())
    proc = subprocess.run(["bash", "-c", f"{script} info | head -1"], capture_output=True,
                          text=True, cwd=REPO_ROOT, timeout=300,
                          env=environment({"VLLM_LOGGING_LEVEL": None}))
    assert proc.stdout.startswith(f"vllm-sampling-plugin {__version__}, vLLM ")
    assert len(proc.stdout.splitlines()) == 1
    for complaint in ("Traceback", "BrokenPipeError", "Logging error", "Exception ignored"):
        assert complaint not in proc.stderr, proc.stderr


def test_output_into_a_closed_pipe_ends_quietly_with_sigpipes_status():
    # The reader gone before the first write, so that the outcome does not
    # depend on timing.
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = run_script("info", "--markdown", stdout=write_end)
    finally:
        os.close(write_end)
    assert proc.returncode == 141, proc.stderr
    assert "Traceback" not in proc.stderr and "BrokenPipeError" not in proc.stderr


@pytest.fixture
def vllm_that_cannot_be_imported(tmp_path) -> dict[str, str]:
    """An environment whose ``import vllm`` fails loudly: a command that
    answers under it answered before importing vLLM (in well under a second,
    where importing vLLM takes 10-20 s on a CI core)."""
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "__init__.py").write_text("raise ImportError('vLLM was imported')\n")
    return {"PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO_ROOT)])}


@pytest.mark.parametrize("value", ["maybe", "", "yes"])
def test_a_malformed_flashinfer_value_fails_on_stderr_at_once(value, vllm_that_cannot_be_imported):
    """Item 5: the error goes to stderr, stdout stays empty, the status is
    not 0, and it comes before vLLM is imported. Empty is no exception:
    vLLM's own reading of the variable (int("")) fails on it too."""
    proc = run_script("info", env={**vllm_that_cannot_be_imported,
                                   config.FLASHINFER_ENV: value})
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr == (f"vllm-sampling-plugin: error: {config.FLASHINFER_ENV}={value!r} "
                           "is not valid: use 1 (FlashInfer draws the top-k/top-p batches it "
                           "can honour), 0 or leave it unset (the plugin's fused kernel draws "
                           "them).\n")


@pytest.mark.parametrize("args, usage", [(["--frob"], "usage: vllm-sampling-plugin [-h]"),
                                         (["info", "--frob"], "usage: vllm-sampling-plugin info "),
                                         (["demo", "--frob"], "usage: vllm-sampling-plugin demo ")])
def test_an_unknown_option_is_named_with_its_commands_usage(args, usage,
                                                            vllm_that_cannot_be_imported):
    """Item 9: the unknown option is named, under the usage of the command it
    was given to, at once."""
    proc = run_script(*args, env=vllm_that_cannot_be_imported)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.startswith(usage)
    assert last_line(proc.stderr).endswith("error: unrecognized arguments: --frob")


def test_no_command_says_which_there_are(vllm_that_cannot_be_imported):
    proc = run_script(env=vllm_that_cannot_be_imported)
    assert proc.returncode == 2
    assert last_line(proc.stderr) == "vllm-sampling-plugin: error: name a command: info or demo"


@pytest.mark.parametrize("command", [[], ["info"], ["demo"]])
def test_help_is_plain_text(command, vllm_that_cannot_be_imported):
    """Item 9: no reStructuredText (``literal``) or Markdown backticks in --help."""
    proc = run_script(*command, "--help", env=vllm_that_cannot_be_imported)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: vllm-sampling-plugin")
    assert "`" not in proc.stdout


@needs_vllm_line("0.20")
@pytest.mark.parametrize("value, meaning", [(None, config.PLUGIN_DRAWS),
                                            ("0", config.PLUGIN_DRAWS),
                                            ("1", config.FLASHINFER_DRAWS)])
def test_info_says_what_the_flashinfer_value_means(value, meaning):
    """Item 6: the meaning shown is the one sentence the docs give
    (config.FLASHINFER_VALUES), and no "on where supported" beside it."""
    proc = run_cli("info", env={config.FLASHINFER_ENV: value})
    shown = "unset" if value is None else value
    assert f"{config.FLASHINFER_ENV}={shown}: {meaning}\n" in proc.stdout
    assert meaning in config.FLASHINFER_VALUES
    assert "where supported" not in proc.stdout


@needs_vllm_line("0.20")
def test_info_with_flashinfer_forced_where_it_cannot_run_fails_on_stderr():
    """=1 on a machine FlashInfer cannot run on: an engine would fail at
    start-up, and info says why on stderr with a non-zero status."""
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU here may run FlashInfer")
    proc = run_cli("info", env={config.FLASHINFER_ENV: "1"})
    assert proc.returncode == 1
    assert "FlashInfer sampler: an engine would fail at start-up here" in proc.stdout
    assert last_line(proc.stderr).startswith(
        f"vllm-sampling-plugin: error: {config.FLASHINFER_ENV}=1 forces FlashInfer")


def test_info_says_when_vllm_plugins_filters_it_out():
    proc = run_cli("info", env={"VLLM_PLUGINS": "something_else"})
    assert "inactive: registered but filtered out by VLLM_PLUGINS" in proc.stdout.splitlines()[0]


def test_info_says_active_and_prints_the_parts_of_the_installed_line():
    """What the seams' adapters find here is LINE_SEAMS's row for this line,
    and info shows it: one line per part, its owner and headline ratio from
    data/measurements.json (the registration-and-seams smoke of every CI line)."""
    from tests.vllm_lines import INSTALLED_LINE
    from vllm_sampling_plugin.integration.parts import SHORT_NAMES, line_found, parts_rows

    proc = run_cli("info")
    assert proc.returncode in (0, 1), proc.stderr
    lines = proc.stdout.splitlines()
    assert ": active (" in lines[0]
    assert f"measured on vLLM {INSTALLED_LINE}: " in proc.stdout
    for part, owner, why, ratio in parts_rows(line_found(INSTALLED_LINE), INSTALLED_LINE):
        row = [line for line in lines if line.startswith(f"  {SHORT_NAMES[part]} ")]
        assert len(row) == 1, part
        assert row[0].split()[len(SHORT_NAMES[part].split())] == owner.split()[0]
        assert row[0].endswith(ratio)
        assert why not in proc.stdout  # behind --verbose
    assert len(lines) <= INFO_MAX_LINES
    assert max(len(line) for line in lines) <= INFO_MAX_WIDTH


def test_info_verbose_adds_the_seams_and_why_each_part_is_whose():
    from tests.vllm_lines import INSTALLED_LINE
    from vllm_sampling_plugin.integration.parts import parts_rows
    from vllm_sampling_plugin.integration.seams import detect_seams

    proc = run_cli("info", "--verbose")
    assert proc.returncode in (0, 1), proc.stderr
    flat = " ".join(proc.stdout.split())
    assert "seam draw: taken (" in flat
    # What info reads: the seams as detected on the installed vLLM.
    for _, _, why, _ in parts_rows(detect_seams(), INSTALLED_LINE):
        assert " ".join(why.split()) in flat


def test_info_markdown_renders_the_compatibility_table():
    proc = run_cli("info", "--markdown")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("| vLLM | draw shape | plugin owns |")


def test_version():
    proc = run_cli("--version")
    assert (proc.returncode, proc.stdout) == (0, f"vllm-sampling-plugin {__version__}\n")


def test_demo_samples_valid_tokens():
    proc = run_cli("demo")
    assert proc.returncode == 0, proc.stderr
    import torch

    tokens = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(tokens) == 4 and all(0 <= t < 64 for t in tokens)
    # Row 0 is greedy over the demo's logits (torch.randn with seed 0).
    logits = torch.randn(4, 64, generator=torch.Generator().manual_seed(0))
    assert tokens[0] == int(logits[0].argmax())


@pytest.mark.parametrize("lab_command", ["bench", "soak"])
def test_the_lab_is_not_a_command_of_the_installed_plugin(lab_command):
    """Benchmarks and soak live in the checkout (python3 -m benchmarks), not the wheel."""
    proc = run_cli(lab_command, "--help")
    assert proc.returncode == 2
    assert f"invalid choice: '{lab_command}'" in proc.stderr
