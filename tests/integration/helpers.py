"""Run Python snippets in fresh interpreters, as vLLM's own processes would."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

# vLLM's start-up chatter is irrelevant to these checks; errors still show.
QUIET_ENV = {"VLLM_LOGGING_LEVEL": "ERROR", "TOKENIZERS_PARALLELISM": "false"}


def run_python(
    code: str, env: dict[str, str | None] | None = None, timeout: int = 300, prelude: str = ""
) -> str:
    """Run ``prelude`` then ``code`` (dedented) in a new interpreter; return
    stdout, fail with its stderr. ``env`` adds to this process's environment;
    a ``None`` value removes that variable."""
    merged = {**os.environ, **QUIET_ENV, **(env or {})}
    full_env = {name: value for name, value in merged.items() if value is not None}
    proc = subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=full_env,
        cwd=REPO_ROOT,
        timeout=timeout,
    )
    if proc.returncode != 0:
        raise AssertionError(
            f"subprocess failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr[-6000:]}"
        )
    return proc.stdout


# Without a GPU, vLLM resolves no platform and cannot infer a device type,
# which argument parsing needs (DeviceConfig defaults). Naming the CPU device
# type lets the real parser run; nothing else about the platform changes.
CPU_DEVICE_SHIM = (
    "import vllm.platforms.interface as _platform\n"
    "_platform.UnspecifiedPlatform.device_type = 'cpu'\n"
)
