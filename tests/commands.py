"""Running what a user types, in a new process, against the checkout under test.

``python3 -m vllm_sampling_plugin.cli`` stands in for the console script
(which may belong to another install); PYTHONPATH and the rest of this
process's environment pass through.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from tests import fresh_interpreter
from tests.integration.helpers import QUIET_ENV, REPO_ROOT

CLI_MODULE = ["-m", "vllm_sampling_plugin.cli"]
CLI = [sys.executable, *CLI_MODULE]
LAB_MODULE = ["-m", "benchmarks"]


def environment(env: dict[str, str | None] | None = None) -> dict[str, str]:
    """This process's environment, quieter, with ``env`` added (None removes)."""
    merged = {**os.environ, **QUIET_ENV, **(env or {})}
    return {name: value for name, value in merged.items() if value is not None}


def run_cli(*args: str, env: dict[str, str | None] | None = None,
            timeout: int = 300) -> subprocess.CompletedProcess:
    """``vllm-sampling-plugin ARGS``; stdout and stderr captured as text."""
    return fresh_interpreter.run([*CLI_MODULE, *args],
                                 env=environment(env), cwd=REPO_ROOT, timeout=timeout)


def run_lab(*args: str, env: dict[str, str | None] | None = None,
            timeout: int = 300) -> subprocess.CompletedProcess:
    """``python3 -m benchmarks ARGS`` from the checkout (the lab is not installed)."""
    return fresh_interpreter.run([*LAB_MODULE, *args],
                                 env=environment(env), cwd=REPO_ROOT, timeout=timeout)


def run_python(code: str, env: dict[str, str | None] | None = None,
               timeout: int = 300) -> subprocess.CompletedProcess:
    """``python3 -c CODE`` (dedented), whatever its exit status."""
    return fresh_interpreter.run(["-c", textwrap.dedent(code)], env=environment(env),
                                 cwd=REPO_ROOT, timeout=timeout)


def last_line(text: str) -> str:
    """The last non-empty line: where a one-line error ends up after any
    library's warnings."""
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""
