"""vLLM 0.32's V2 Sampler with the plugin's seeded, batch-invariant draw.

Upstream's ``Sampler.sample`` applies logits processors, thinking budget,
temperature and min-p, then calls ``_sample_random`` with the top-k/top-p
tensors and whether FlashInfer (or the XPU kernel) may take the batch. Only
``_sample_random`` is overridden, so everything before it, and logprobs,
trace replay and the sampling mask after it, are upstream's code.

FlashInfer/XPU batches get upstream's draw unchanged (upstream already
decided, honouring ``VLLM_USE_FLASHINFER_SAMPLER``); every other batch goes
to the release-independent draw in integration/upstream_sampler.py. What is
0.32's own here is ``_sample_random``'s signature and the two-argument
``apply_top_k_top_p`` (``sample/sampler.py:327-356`` of the 0.32.0 wheel).
Precision is upstream's ``ModelConfig.use_fp64_gumbel``, which the runner
passes to the constructor.
"""

from __future__ import annotations

import numpy as np
import torch
import vllm.v1.worker.gpu.sample.sampler as upstream

from vllm_sampling_plugin.integration.upstream_sampler import PluginDrawMixin


class PluginSampler(PluginDrawMixin, upstream.Sampler):
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
        return self.plugin_draw(
            processed_logits,
            expanded_idx_mapping,
            idx_mapping_np,
            pos,
            top_k,
            top_p,
            mask=lambda logits: upstream.apply_top_k_top_p(logits, top_k, top_p),
        )
