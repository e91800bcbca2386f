"""The draw in the ``_sample_random()`` shape (0.30 on): upstream's ``sample``
calls ``_sample_random(processed_logits, expanded_idx_mapping, idx_mapping_np,
pos, top_k, top_p, *mask_args, use_fused)``; only that method is overridden.
Arguments between ``top_p`` and the flag (0.33's ``has_topp_only_rows``) go
to upstream's ``apply_top_k_top_p`` by name."""

from __future__ import annotations

import inspect

import numpy as np
import torch
import vllm.v1.worker.gpu.sample.sampler as upstream

from vllm_sampling_plugin.integration.draw.plugin_draw import PluginDrawMixin

# _sample_random's leading parameters, the same in every release that has it.
DRAW_INPUTS = ("processed_logits", "expanded_idx_mapping", "idx_mapping_np", "pos", "top_k", "top_p")


def parameters(fn) -> list[str]:
    return [name for name in inspect.signature(fn).parameters if name != "self"]


class PluginRandomDrawSampler(PluginDrawMixin, upstream.Sampler):
    """The SAMPLE_RANDOM shape: only ``_sample_random`` is overridden."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # The arguments upstream passes between top_p and its fused flag,
        # which its mask takes by these names.
        self.mask_names = tuple(
            parameters(upstream.Sampler._sample_random)[len(DRAW_INPUTS) : -1]
        )

    def _sample_random(
        self,
        processed_logits: torch.Tensor,  # [num_tokens, vocab_size]
        expanded_idx_mapping: torch.Tensor,  # [num_tokens]
        idx_mapping_np: np.ndarray,
        pos: torch.Tensor,  # [num_tokens] int64
        top_k: torch.Tensor | None,
        top_p: torch.Tensor | None,
        *mask_args_and_fused,  # the mask_names' values, then upstream's fused flag
    ) -> tuple[torch.Tensor, torch.Tensor]:
        *mask_args, fused = mask_args_and_fused
        if fused:
            return super()._sample_random(
                processed_logits,
                expanded_idx_mapping,
                idx_mapping_np,
                pos,
                top_k,
                top_p,
                *mask_args_and_fused,
            )
        return self.plugin_draw(
            processed_logits,
            expanded_idx_mapping,
            pos,
            top_k,
            top_p,
            self.needs_masked_logits(idx_mapping_np),
            mask=lambda logits: upstream.apply_top_k_top_p(
                logits, top_k, top_p, **dict(zip(self.mask_names, mask_args))
            ),
        )
