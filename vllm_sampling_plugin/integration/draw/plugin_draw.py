"""The plugin's draw, mixed in before upstream's Sampler in the shapes where
upstream's ``sample()`` leaves top-k/top-p to the draw (``sample(skip_top_k_top_p)``,
``_sample_random()``): the Gumbel-max kernel, upstream's mask then Gumbel-max
where the returned logits must carry the mask, the fused top-k/top-p kernel
otherwise; the noise stream per engine (noise.py)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import vllm.v1.worker.gpu.sample.sampler as upstream

from vllm_sampling_plugin.integration.draw.noise import (
    PLUGIN_FP32_STREAM,
    fp32_noise,
    upstream_sampler_instead,
    upstream_fp64_stream,
)
from vllm_sampling_plugin.ops.gumbel import gumbel_sample
from vllm_sampling_plugin.ops.topk_topp import top_k_top_p_sample
from vllm_sampling_plugin.selection import takes_flashinfer_batches

logger = logging.getLogger("vllm.vllm_sampling_plugin")

# The logprobs modes whose returned logits are the processed (masked) ones.
PROCESSED_MODES = ("processed_logprobs", "processed_logits")

# Upstream's top-k/top-p mask bound to one step: processed logits in, masked out.
MaskFn = Callable[[torch.Tensor], torch.Tensor]


def _engine_config(args: tuple, kwargs: dict) -> Any:
    """The engine's VllmConfig: upstream's Sampler takes it first from 0.31
    (the runner passes it by name); before, the one being built is current."""
    from vllm.config import get_current_vllm_config_or_none

    config = kwargs.get("vllm_config", args[0] if args else None)
    if hasattr(config, "speculative_config"):
        return config
    return get_current_vllm_config_or_none()


class PluginDrawMixin:
    """Mixed in before upstream's ``Sampler``: adds the draw; of upstream's
    methods it overrides only ``__init__``, to take FlashInfer's batches
    unless the user asked for FlashInfer, to pick the FP32 noise stream
    (noise.py), and to log those decisions."""

    fp32_stream = PLUGIN_FP32_STREAM

    def __new__(cls, *args, **kwargs):
        # An engine whose seeded draws only upstream's noise keeps
        # reproducible stays upstream's (noise.py).
        sampler = upstream_sampler_instead(upstream.Sampler, _engine_config(args, kwargs), args, kwargs)
        return sampler if sampler is not None else super().__new__(cls)

    def __init__(self, *args, **kwargs):
        from vllm import envs

        super().__init__(*args, **kwargs)
        vllm_config = _engine_config(args, kwargs)
        self.fp64_stream = upstream_fp64_stream()
        self.fp32_stream, fp32_note = fp32_noise(vllm_config)
        self.use_flashinfer, flashinfer_note = takes_flashinfer_batches(
            self.use_flashinfer, envs.is_set("VLLM_USE_FLASHINFER_SAMPLER")
        )
        logger.info(
            "vllm-sampling-plugin sampler: Gumbel-max noise in %s (upstream's "
            "use_fp64_gumbel); %s.",
            f"FP64, upstream's {self.fp64_stream} stream"
            if self.use_fp64_gumbel
            else fp32_note,
            flashinfer_note,
        )

    def needs_masked_logits(self, idx_mapping_np: np.ndarray) -> bool:
        """Whether this step returns logits that must show the top-k/top-p mask."""
        if getattr(self, "return_sampling_mask", False):
            return True
        return (
            self.logprobs_mode in PROCESSED_MODES
            and self.get_logprobs_dims(idx_mapping_np) is not None
        )

    def plugin_draw(
        self,
        processed_logits: torch.Tensor,  # [num_tokens, vocab_size]
        expanded_idx_mapping: torch.Tensor,  # [num_tokens] int64
        pos: torch.Tensor,  # [num_tokens] int64
        top_k: torch.Tensor | None,  # [num_tokens], None: no row uses top-k
        top_p: torch.Tensor | None,  # [num_tokens], None: no row uses top-p
        masked_logits_returned: bool,
        mask: MaskFn,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(sampled token ids, the logits to return) for a batch upstream did
        not give to FlashInfer/XPU."""
        if top_k is None and top_p is None:
            return self.draw_gumbel(processed_logits, expanded_idx_mapping, pos), processed_logits
        if masked_logits_returned:
            # Upstream's mask keeps the returned logits what upstream returns.
            masked = mask(processed_logits)
            return self.draw_gumbel(masked, expanded_idx_mapping, pos), masked
        sampled = self.draw_top_k_top_p(processed_logits, expanded_idx_mapping, pos)
        return sampled, processed_logits

    def draw_top_k_top_p(
        self,
        logits: torch.Tensor,  # [num_tokens, vocab_size]
        expanded_idx_mapping: torch.Tensor,  # [num_tokens] int64
        pos: torch.Tensor,  # [num_tokens] int64
    ) -> torch.Tensor:
        """The fused top-k/top-p kernel on the requests' own top-k/top-p."""
        states = self.sampling_states
        return top_k_top_p_sample(
            logits,
            expanded_idx_mapping,
            states.temperature.gpu,
            states.seeds.gpu,
            pos,
            states.top_k.gpu,
            states.top_p.gpu,
            apply_temperature=False,
            **self.noise_options(),
        )

    def draw_gumbel(
        self,
        logits: torch.Tensor,  # [num_tokens, vocab_size]
        expanded_idx_mapping: torch.Tensor,  # [num_tokens] int64
        pos: torch.Tensor,  # [num_tokens] int64
    ) -> torch.Tensor:
        states = self.sampling_states
        return gumbel_sample(
            logits,
            expanded_idx_mapping,
            states.temperature.gpu,
            states.seeds.gpu,
            pos,
            apply_temperature=False,
            **self.noise_options(),
        )

    def noise_options(self) -> dict[str, Any]:
        """The draw's precision and noise streams, as the ops take them."""
        return {
            "use_fp64": self.use_fp64_gumbel,
            "fp64_stream": self.fp64_stream,
            "fp32_stream": self.fp32_stream,
        }
