"""The vLLM release lines this plugin supports, and which one is installed.

A release line is a minor release (``0.20`` covers 0.20.0, 0.20.1, ...). Each
line has its own integration module (``integration/v0_20.py``,
``integration/v0_32/``); everything else is shared.

0.33 is not a supported line: its V2 Sampler's ``_sample_random`` (the method
the 0.32 line overrides) takes an extra ``has_topp_only_rows`` argument and
``SamplingStates.get_top_k_top_p`` returns three values, so the 0.32 override
would be called with the wrong arguments (see
docs/design/vllm-0.32-integration.md).
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from packaging.version import Version

LINE_0_20 = "0.20"
LINE_0_32 = "0.32"
SUPPORTED_LINES = (LINE_0_20, LINE_0_32)
SUPPORTED_RANGE = " or ".join(
    f">={line}.0,<{line.split('.')[0]}.{int(line.split('.')[1]) + 1}"
    for line in SUPPORTED_LINES
)


def installed_vllm_version() -> str | None:
    try:
        return version("vllm")
    except PackageNotFoundError:
        return None


def release_line(found: str | None) -> str | None:
    """The supported line ``found`` belongs to, or None (unsupported or absent)."""
    if found is None:
        return None
    release = Version(Version(found).base_version)
    line = f"{release.major}.{release.minor}"
    return line if line in SUPPORTED_LINES else None


def vllm_version_supported(found: str | None = None) -> bool:
    found = installed_vllm_version() if found is None else found
    return release_line(found) is not None
