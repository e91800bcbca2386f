"""Skip markers for tests that exercise one vLLM release line's integration."""

from __future__ import annotations

import pytest

from vllm_sampling_plugin.integration.version import installed_vllm_version, release_line

INSTALLED_VERSION = installed_vllm_version()
INSTALLED_LINE = release_line(INSTALLED_VERSION)


def _needs(lines: tuple[str, ...]) -> str:
    wanted = " or ".join(f"{line}.x" for line in lines)
    return f"needs vLLM {wanted}; vLLM {INSTALLED_VERSION} is installed"


def needs_vllm_line(*lines: str, why: str = "") -> pytest.MarkDecorator:
    """Skip unless the installed vLLM belongs to one of the release ``lines``;
    ``why`` (optional) says what of those lines the tests exercise."""
    reason = _needs(lines) + (f" ({why})" if why else "")
    return pytest.mark.skipif(INSTALLED_LINE not in lines, reason=reason)


def skip_module_unless_line(*lines: str) -> None:
    """Call at the top of a test module, before it imports some lines' vLLM
    internals, so that on another line the module is skipped, not an error."""
    if INSTALLED_LINE not in lines:
        pytest.skip(_needs(lines), allow_module_level=True)


def needs_seam(seam: str, *shapes: str) -> pytest.MarkDecorator:
    """Skip unless the installed line takes ``seam`` in one of ``shapes``
    (integration/version.py's LINE_SEAMS): tests of one seam's shape run on
    every line that has it."""
    from vllm_sampling_plugin.integration.version import LINE_SEAMS

    found = LINE_SEAMS.get(INSTALLED_LINE, {}).get(seam)
    reason = f"needs the {seam} seam in a shape of {shapes}; vLLM {INSTALLED_VERSION} has {found}"
    return pytest.mark.skipif(found not in shapes, reason=reason)
