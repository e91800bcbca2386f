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
