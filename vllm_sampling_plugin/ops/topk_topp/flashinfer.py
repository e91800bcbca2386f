"""FlashInfer's fused top-k/top-p sampler, behind a support probe.

FlashInfer samples by rejection over the probability distribution and draws
its randomness from its own generator: it does not follow the plugin's
``(seed, position, token)`` noise, so the plugin routes requests with an
explicit seed (and greedy rows) elsewhere.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

import torch

# FlashInfer's sampling kernels are built for compute capability 7.5 to 12.1
# (the range vLLM 0.20 checks for FlashInfer, too).
MIN_CAPABILITY = (7, 5)
MAX_CAPABILITY = (12, 1)


@dataclass(frozen=True)
class FlashInferSupport:
    """Whether FlashInfer's sampler can run here, and if not, why."""

    importable: bool
    hardware_ok: bool
    reason: str = ""

    @property
    def usable(self) -> bool:
        return self.importable and self.hardware_ok


def probe_flashinfer(device: torch.device | None = None) -> FlashInferSupport:
    """Check that ``flashinfer.sampling`` imports and the CUDA device is in range.

    Touches CUDA (capability query): call it in workers, not in the front-end.
    """
    try:
        importlib.import_module("flashinfer.sampling")
    except Exception as e:  # ImportError, or a broken install failing otherwise
        return FlashInferSupport(False, False, f"flashinfer cannot be imported ({e})")
    if not torch.cuda.is_available():
        return FlashInferSupport(True, False, "no CUDA device is available")
    capability = torch.cuda.get_device_capability(device)
    if not MIN_CAPABILITY <= capability <= MAX_CAPABILITY:
        return FlashInferSupport(
            True,
            False,
            f"compute capability {capability[0]}.{capability[1]} is outside the "
            f"range FlashInfer's sampling kernels support "
            f"({MIN_CAPABILITY[0]}.{MIN_CAPABILITY[1]} to "
            f"{MAX_CAPABILITY[0]}.{MAX_CAPABILITY[1]})",
        )
    return FlashInferSupport(True, True)


def flashinfer_top_k_top_p_sample(
    logits: torch.Tensor,  # [num_tokens, vocab] float32, temperature applied
    top_k: torch.Tensor,  # [num_tokens] int32; vocab_size means "off"
    top_p: torch.Tensor,  # [num_tokens] float32; 1.0 means "off"
) -> torch.Tensor:
    """Sample one token per row with FlashInfer's top-k-then-top-p kernel.

    Returns ``[num_tokens]`` int64 ids, always inside ``[0, vocab)``: a row that
    FlashInfer cannot sample (all ``-inf``, or NaN from ``+inf``/NaN logits)
    yields an id that is clamped into range instead of reaching the model.
    """
    from flashinfer.sampling import top_k_top_p_sampling_from_logits

    sampled = top_k_top_p_sampling_from_logits(
        logits.contiguous(), top_k, top_p, deterministic=True
    )
    return sampled.long().clamp_(0, logits.shape[-1] - 1)
