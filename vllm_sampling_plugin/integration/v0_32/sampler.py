"""vLLM 0.32's V2 Sampler with the plugin's seeded, batch-invariant draw.

Upstream's ``Sampler.sample`` applies logits processors, thinking budget,
temperature and min-p, then calls ``_sample_random`` with the top-k/top-p
tensors and whether FlashInfer (or the XPU kernel) may take the batch. Only
``_sample_random`` is overridden, so everything before it, and logprobs,
trace replay and the sampling mask after it, are upstream's code.

* FlashInfer/XPU batches: upstream's draw, unchanged (upstream already
  decided, honouring ``VLLM_USE_FLASHINFER_SAMPLER``).
* No top-k/top-p: the plugin's Gumbel-max kernel.
* top-k/top-p where the returned logits must carry the mask (processed
  logprobs, ``return_sampling_mask``): upstream's mask, then the plugin's
  Gumbel-max kernel.
* other top-k/top-p batches (greedy rows, explicit seeds, FlashInfer off or
  unsupported): the plugin's fused top-k/top-p kernel.

Every non-FlashInfer row is drawn with the plugin's (seed, position) noise,
so a seeded request gets the same token whatever route its batch-mates take.
Precision is upstream's ``ModelConfig.use_fp64_gumbel``, which the runner
passes to the constructor.
"""

from __future__ import annotations

import logging

import numpy as np
import torch
import vllm.v1.worker.gpu.sample.sampler as upstream
from vllm.config.model import PROCESSED_LOGPROBS_MODES

from vllm_sampling_plugin.ops.gumbel import gumbel_sample
from vllm_sampling_plugin.ops.topk_topp import top_k_top_p_sample

logger = logging.getLogger("vllm.vllm_sampling_plugin")


class PluginSampler(upstream.Sampler):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        logger.info(
            "vllm-sampling-plugin sampler: Gumbel-max noise in %s (upstream's "
            "use_fp64_gumbel); FlashInfer batches stay upstream's.",
            "FP64" if self.use_fp64_gumbel else "FP32",
        )

    def needs_masked_logits(self, idx_mapping_np: np.ndarray) -> bool:
        """Whether this step returns logits that must show the top-k/top-p mask."""
        if self.return_sampling_mask:
            return True
        return (
            self.logprobs_mode in PROCESSED_LOGPROBS_MODES
            and self.get_logprobs_dims(idx_mapping_np) is not None
        )

    def _sample_random(
        self,
        processed_logits: torch.Tensor,  # [num_tokens, vocab_size]
        expanded_idx_mapping: torch.Tensor,  # [num_tokens] int32
        idx_mapping_np: np.ndarray,
        pos: torch.Tensor,  # [num_tokens] int64
        top_k: torch.Tensor | None,  # [num_tokens], None: no row uses top-k
        top_p: torch.Tensor | None,  # [num_tokens], None: no row uses top-p
        use_fused_sampler: bool,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if use_fused_sampler:
            return super()._sample_random(
                processed_logits,
                expanded_idx_mapping,
                idx_mapping_np,
                pos,
                top_k,
                top_p,
                use_fused_sampler,
            )
        states = self.sampling_states
        if top_k is None and top_p is None:
            return self.draw_gumbel(processed_logits, expanded_idx_mapping, pos), processed_logits
        if self.needs_masked_logits(idx_mapping_np):
            # Upstream's mask keeps the returned logits what upstream returns.
            masked = upstream.apply_top_k_top_p(processed_logits, top_k, top_p)
            return self.draw_gumbel(masked, expanded_idx_mapping, pos), masked
        sampled = top_k_top_p_sample(
            processed_logits,
            expanded_idx_mapping,
            states.temperature.gpu,
            states.seeds.gpu,
            pos,
            states.top_k.gpu,
            states.top_p.gpu,
            apply_temperature=False,
            use_fp64=self.use_fp64_gumbel,
        )
        return sampled, processed_logits

    def draw_gumbel(
        self,
        logits: torch.Tensor,  # [num_tokens, vocab_size]
        expanded_idx_mapping: torch.Tensor,  # [num_tokens] int32
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
            use_fp64=self.use_fp64_gumbel,
        )
