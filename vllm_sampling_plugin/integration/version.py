"""The vLLM releases this plugin supports."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from packaging.version import Version

SUPPORTED_RANGE = ">=0.20.0,<0.21"
_LOWEST, _BEYOND = Version("0.20.0"), Version("0.21")


def installed_vllm_version() -> str | None:
    try:
        return version("vllm")
    except PackageNotFoundError:
        return None


def vllm_version_supported(found: str | None = None) -> bool:
    found = installed_vllm_version() if found is None else found
    if found is None:
        return False
    release = Version(Version(found).base_version)
    return _LOWEST <= release < _BEYOND
