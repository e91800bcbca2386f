"""The ``vllm.general_plugins`` entry point.

vLLM calls :func:`register` once in every process that loads plugins: the
front-end (through ``EngineArgs``), each engine core and each worker. With
the fork start method children inherit the patched modules and do not call it
again, so every patch is applied here, eagerly, in whichever process runs
first. Nothing here touches CUDA (that would force spawn on later children).
"""

from __future__ import annotations

import logging

from vllm_sampling_plugin.integration.common.found import Found
from vllm_sampling_plugin.integration.parts import parts_summary
from vllm_sampling_plugin.integration.version import (
    MEASURED_RANGE,
    SUPPORTED_RANGE,
    installed_vllm_version,
    is_measured,
    release_line,
)

logger = logging.getLogger("vllm.vllm_sampling_plugin")

# None: register() has not run in this process; otherwise what it decided.
_state: str | None = None


def register() -> None:
    """Apply every seam the installed vLLM offers in a known shape. Idempotent."""
    global _state
    if _state is not None:
        return
    found = installed_vllm_version()
    line = release_line(found)
    if line is None:
        _state = f"inactive: vLLM {found} is outside the supported range {SUPPORTED_RANGE}"
        logger.error(
            "vllm-sampling-plugin supports vLLM %s but vLLM %s is installed; "
            "the plugin is inactive and vLLM runs unchanged.",
            SUPPORTED_RANGE,
            found,
        )
        return
    from vllm_sampling_plugin.integration.seams import apply_seams, detect_seams

    seams = detect_seams()
    if not is_measured(line):
        _warn_unmeasured(found, seams)
    apply_seams(seams)
    if not any(seam.is_taken for seam in seams.values()):
        _state = f"inactive: vLLM {found} offers no seam in a shape the plugin knows"
        if is_measured(line):
            logger.error("vllm-sampling-plugin is %s; vLLM runs unchanged.", _state)
        return
    _state = "active"
    logger.info("vllm-sampling-plugin active for vLLM %s: %s.", found, parts_summary(seams))


def _warn_unmeasured(found: str, seams: dict[str, Found]) -> None:
    """The one line that says a release newer than every measured one runs
    with the seams whose shapes the adapters recognise."""
    left = [seam.seam for seam in seams.values() if not seam.is_taken]
    logger.warning(
        "vllm-sampling-plugin: vLLM %s is newer than the releases measured on a GPU "
        "(%s); it takes the seams whose shapes it recognises and leaves %s to upstream.",
        found,
        MEASURED_RANGE,
        ", ".join(left) if left else "none",
    )


def registration_state() -> str | None:
    """``"active"``, ``"inactive: <why>"``, or None if register() never ran."""
    return _state
