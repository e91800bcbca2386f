"""vLLM 0.33's V2 Sampler with the plugin's seeded, batch-invariant draw.

0.33's ``Sampler.sample`` (``sample/sampler.py:278-326`` of the 0.33.0
wheel) works as 0.32's, except that ``SamplingStates.get_top_k_top_p`` also
returns ``has_topp_only_rows`` (``sample/states.py:105-121``), which
``sample`` passes to ``_sample_random`` before ``use_fused_sampler``
(``sampler.py:328-360``) and which upstream's ``apply_top_k_top_p``
(``v1/sample/ops/topk_topp_sampler.py:501-521``) takes as a keyword: whether
any row has top-p without top-k, so its Triton mask may skip a pass when
none has.

Only ``_sample_random`` is overridden: FlashInfer/XPU batches get
upstream's draw unchanged, every other batch the release-independent draw in
integration/upstream_sampler.py, whose masked route calls upstream's mask
with ``has_topp_only_rows`` as upstream would. Precision is upstream's
``ModelConfig.use_fp64_gumbel``, which the runner passes to the constructor
(``model_runner.py:489``).
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
        has_topp_only_rows: bool,  # some row has top-p < 1 and no top-k
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
                has_topp_only_rows,
                use_fused_sampler,
            )
        return self.plugin_draw(
            processed_logits,
            expanded_idx_mapping,
            idx_mapping_np,
            pos,
            top_k,
            top_p,
            mask=lambda logits: upstream.apply_top_k_top_p(
                logits, top_k, top_p, has_topp_only_rows=has_topp_only_rows
            ),
        )
