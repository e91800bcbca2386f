"""Whether the sampler uses FlashInfer's top-k/top-p kernel: decided once per
worker from the resolved ``VLLM_USE_FLASHINFER_SAMPLER`` and the hardware.

| setting            | FlashInfer usable | result                              |
|--------------------|-------------------|-------------------------------------|
| 0                  | (not probed)      | plugin path, one INFO line          |
| unset or 1         | import fails      | plugin path, one INFO line          |
| 1                  | GPU unsupported   | RuntimeError naming the variable    |
| unset              | GPU unsupported   | plugin path, one INFO line          |
| 1                  | yes               | FlashInfer, one INFO line           |
| unset              | yes               | plugin's fused kernel, one INFO line|

FlashInfer is on by default where it runs, but the plugin's fused top-k/top-p
kernel measured faster than FlashInfer at every batch size we benchmarked
(docs/benchmarks.md), honours per-request seeds and is batch-invariant, so by
default it takes the top-k/top-p batches. ``VLLM_USE_FLASHINFER_SAMPLER=1``
keeps its meaning: FlashInfer takes every batch it can honour.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from vllm_sampling_plugin.config import FLASHINFER_ENV
from vllm_sampling_plugin.ops.topk_topp.flashinfer import FlashInferSupport, probe_flashinfer

logger = logging.getLogger("vllm.vllm_sampling_plugin")


@dataclass(frozen=True)
class FlashInferDecision:
    use: bool
    # logging.INFO / logging.WARNING, or logging.ERROR when start-up must fail.
    level: int
    message: str


def decide_flashinfer(
    setting: bool | None, probe: Callable[[], FlashInferSupport] = probe_flashinfer
) -> FlashInferDecision:
    """The decision and the one line that explains it (no logging, no raising)."""
    if setting is False:
        return FlashInferDecision(
            False,
            logging.INFO,
            f"FlashInfer top-k/top-p sampling is off ({FLASHINFER_ENV}=0); "
            f"using the plugin's Triton sampler.",
        )
    support = probe()
    how = f"{FLASHINFER_ENV}=1" if setting else f"{FLASHINFER_ENV} unset"
    if not support.importable:
        return FlashInferDecision(
            False,
            logging.INFO,
            f"FlashInfer top-k/top-p sampling is not used ({how}): "
            f"{support.reason}; using the plugin's Triton sampler.",
        )
    if not support.hardware_ok:
        if setting:
            return FlashInferDecision(
                False,
                logging.ERROR,
                f"{FLASHINFER_ENV}=1 forces FlashInfer's top-k/top-p sampler, but "
                f"{support.reason}. Unset {FLASHINFER_ENV} (or set it to 0) to "
                f"use the plugin's Triton sampler.",
            )
        # Nothing is lost: unset, the plugin's fused kernel would take these
        # batches even where FlashInfer runs.
        return FlashInferDecision(
            False,
            logging.INFO,
            f"FlashInfer top-k/top-p sampling is not used ({how}): {support.reason}; "
            f"the plugin's fused top-k/top-p kernel, the default, takes those batches.",
        )
    if setting is None:
        return FlashInferDecision(
            False,
            logging.INFO,
            f"FlashInfer top-k/top-p sampling is available ({how}), but the "
            f"plugin's fused top-k/top-p kernel is faster at every measured "
            f"batch size and honours per-request seeds, so it is used; set "
            f"{FLASHINFER_ENV}=1 to use FlashInfer instead.",
        )
    return FlashInferDecision(
        True,
        logging.INFO,
        f"Using FlashInfer top-k/top-p sampling ({how}) for batches it can "
        f"honour (no greedy rows, no explicit seeds, no processed logprobs).",
    )


def takes_flashinfer_batches(upstream_uses_flashinfer: bool, explicitly_set: bool) -> tuple[bool, str]:
    """Where upstream decides FlashInfer itself (its V2 sampler from 0.23 on):
    whether FlashInfer keeps its batches, and the clause that says why.

    Upstream turns FlashInfer on where the GPU supports it; only an explicit
    ``VLLM_USE_FLASHINFER_SAMPLER=1`` keeps it (``=0`` already has it off),
    as on the line where the plugin decides (the table above).
    """
    if upstream_uses_flashinfer and not explicitly_set:
        return False, (
            "top-k/top-p batches FlashInfer would take are the plugin's fused "
            f"kernel's ({FLASHINFER_ENV}=1 keeps them FlashInfer's)"
        )
    if upstream_uses_flashinfer:
        return True, f"FlashInfer batches stay upstream's ({FLASHINFER_ENV}=1)"
    return False, "FlashInfer is off; every top-k/top-p batch is the plugin's"


def use_flashinfer_sampler(
    setting: bool | None, probe: Callable[[], FlashInferSupport] = probe_flashinfer
) -> bool:
    """Decide, log the decision once, and raise if a forced setting cannot hold."""
    decision = decide_flashinfer(setting, probe)
    if decision.level == logging.ERROR:
        raise RuntimeError(decision.message)
    logger.log(decision.level, decision.message)
    return decision.use
