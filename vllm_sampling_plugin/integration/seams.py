"""The plugin's seams in vLLM's V2 runner, one folder each, applied in order.

Each seam folder's ``__init__.py`` has ``NAME``, ``detect(...) -> Found``
(reads the installed vLLM, patches nothing; a later seam gets what the seams
it needs found) and ``apply(shape)``, and one module per vLLM shape it
knows. A seam whose shape the installed vLLM does not have stays upstream's,
with one log line naming it and why; the others still apply.

| seam | folder | parts (integration/parts.py) |
|---|---|---|
| settings | settings/ | use_fp64_gumbel, VLLM_USE_FLASHINFER_SAMPLER |
| draw | draw/ | Gumbel-max, top-k/top-p (both kinds of batches) |
| rejection | verification/ | rejection sampling |
| speculator | speculator/ | n-gram speculator, adaptive speculation policy |
| warm-up | warmup/ | (start-up cost of the above) |
"""

from __future__ import annotations

import importlib
import logging

from vllm_sampling_plugin.integration.common import shapes
from vllm_sampling_plugin.integration.common.found import Found

logger = logging.getLogger("vllm.vllm_sampling_plugin")

_MODULES = {
    shapes.SETTINGS: "vllm_sampling_plugin.integration.settings",
    shapes.DRAW: "vllm_sampling_plugin.integration.draw",
    shapes.REJECTION: "vllm_sampling_plugin.integration.verification",
    shapes.SPECULATOR: "vllm_sampling_plugin.integration.speculator",
    shapes.WARM_UP: "vllm_sampling_plugin.integration.warmup",
}


def detect_seams() -> dict[str, Found]:
    """What each seam's adapter finds in the installed vLLM, by seam name."""
    found_draw = _detected(shapes.DRAW)
    found_rejection = _detected(shapes.REJECTION, found_draw)
    found = [
        _detected(shapes.SETTINGS),
        found_draw,
        found_rejection,
        _detected(shapes.SPECULATOR, found_rejection),
        _detected(shapes.WARM_UP, found_draw),
    ]
    return {f.seam: f for f in found}


def _detected(seam: str, *needs: Found) -> Found:
    """The seam module's ``detect(*needs)``, or the seam off with the error
    that importing or asking vLLM raised (a release that moved or broke a
    module the adapter reads)."""
    try:
        module = importlib.import_module(_MODULES[seam])
        return module.detect(*needs)
    except Exception as e:
        return Found.off(seam, f"{type(e).__name__}: {e}")


def apply_seams(found: dict[str, Found]) -> None:
    """Apply every taken seam, settings first (the front-end reads them);
    log one line for each seam left to upstream. Each ``apply`` imports what
    it needs before it patches anything, so one that raises leaves its seam
    untouched; the seams after it, which may need it, are not applied."""
    for name in shapes.SEAMS:
        seam = found[name]
        if seam.is_taken:
            try:
                importlib.import_module(_MODULES[name]).apply(seam.shape)
            except Exception:
                logger.exception(
                    "vllm-sampling-plugin: applying the %s seam (%s) failed; it and "
                    "the seams after it stay upstream's.", seam.seam, seam.shape
                )
                return
        else:
            logger.info(
                "vllm-sampling-plugin: %s stays upstream's: %s.", seam.seam, seam.reason
            )
