"""The ``vllm.general_plugins`` entry point.

vLLM calls :func:`register` once in every process that loads plugins: the
front-end (through ``EngineArgs``), each engine core and each worker. With
the fork start method children inherit the patched modules and do not call it
again, so every patch is applied here, eagerly, in whichever process runs
first. Nothing here touches CUDA (that would force spawn on later children).
"""

from __future__ import annotations

import logging

from vllm_sampling_plugin.integration.parts import parts_summary
from vllm_sampling_plugin.integration.version import (
    SUPPORTED_RANGE,
    installed_vllm_version,
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
    apply_seams(seams)
    if not any(seam.is_taken for seam in seams.values()):
        _state = f"inactive: vLLM {found} offers no seam in a shape the plugin knows"
        logger.error("vllm-sampling-plugin is %s; vLLM runs unchanged.", _state)
        return
    _state = "active"
    logger.info(
        "vllm-sampling-plugin active for vLLM %s: %s.", found, parts_summary(seams, line)
    )


def registration_state() -> str | None:
    """``"active"``, ``"inactive: <why>"``, or None if register() never ran."""
    return _state
