"""``python3 -m benchmarks``: the lab's commands, as run from a checkout."""

import re

import pytest

from benchmarks.__main__ import COMMANDS
from tests.commands import last_line, run_lab


@pytest.mark.parametrize("argv", [[], ["nope"]])
def test_a_command_is_needed_and_must_be_known(argv):
    proc = run_lab(*argv)
    assert proc.returncode == 2
    assert last_line(proc.stderr).startswith("python3 -m benchmarks: error: ")
    assert "usage: python3 -m benchmarks COMMAND [ARGS...]" in proc.stderr


def test_help_lists_every_command():
    proc = run_lab("--help")
    assert proc.returncode == 0
    listed = re.findall(r"^  (\w+) ", proc.stdout.split("commands:\n", 1)[1], re.MULTILINE)
    assert listed == list(COMMANDS)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_help_names_the_whole_command_plainly(command):
    proc = run_lab(command, "--help")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"usage: python3 -m benchmarks {command} ")
    assert "`" not in proc.stdout, "reStructuredText markup in --help"
    assert not re.search(r"\bissues? #?\d", proc.stdout), "internal issue numbers in --help"


def test_e2e_help_fits_two_screens():
    proc = run_lab("e2e", "--help")
    assert proc.returncode == 0
    assert len(proc.stdout.splitlines()) <= 120
