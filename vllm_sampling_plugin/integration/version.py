"""The vLLM release lines this plugin supports, and which one is installed.

A release line is a minor release (``0.20`` covers 0.20.0, 0.20.1, ...). Each
line has its own integration module (``integration/v0_20.py``,
``integration/v0_32/``, ``integration/v0_33/``); everything else is shared.

0.32 and 0.33 differ, for the plugin, only in the signature of the V2
Sampler's ``_sample_random`` (0.33 adds ``has_topp_only_rows``), so each has
its own small override and both share integration/upstream_sampler.py (see
docs/design/vllm-0.32-integration.md).
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from packaging.version import Version

LINE_0_20 = "0.20"
LINE_0_32 = "0.32"
LINE_0_33 = "0.33"
SUPPORTED_LINES = (LINE_0_20, LINE_0_32, LINE_0_33)
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
