"""Skip markers for tests that exercise one vLLM release line's integration."""

from __future__ import annotations

import pytest

from vllm_sampling_plugin.integration.version import installed_vllm_version, release_line

INSTALLED_VERSION = installed_vllm_version()
INSTALLED_LINE = release_line(INSTALLED_VERSION)


def needs_vllm_line(line: str) -> pytest.MarkDecorator:
    """Skip unless the installed vLLM belongs to release line ``line``."""
    return pytest.mark.skipif(
        INSTALLED_LINE != line,
        reason=f"needs vLLM {line}.x; vLLM {INSTALLED_VERSION} is installed",
    )


def skip_module_unless_line(line: str) -> None:
    """Call at the top of a test module, before it imports one line's vLLM
    internals, so that on another line the module is skipped, not an error."""
    if INSTALLED_LINE != line:
        pytest.skip(
            f"needs vLLM {line}.x; vLLM {INSTALLED_VERSION} is installed",
            allow_module_level=True,
        )
