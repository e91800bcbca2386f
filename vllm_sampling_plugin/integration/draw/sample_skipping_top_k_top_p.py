"""The draw in the ``sample(skip_top_k_top_p)`` shape (0.23-0.29): upstream's
``sample`` applies the parameters with ``skip_top_k_top_p=True``, decides
whether FlashInfer may take the batch, then masks and draws inline; the
plugin's ``sample`` keeps those steps and draws every other batch itself."""

from __future__ import annotations

import torch
import vllm.v1.worker.gpu.sample.sampler as upstream

from vllm_sampling_plugin.integration.draw.plugin_draw import PROCESSED_MODES, PluginDrawMixin


class PluginInlineDrawSampler(PluginDrawMixin, upstream.Sampler):
    """The SAMPLE_SKIPPING_TOP_K_TOP_P shape, where upstream draws inline in
    ``sample``: upstream's steps up to its FlashInfer decision, then the
    plugin's draw for every batch FlashInfer does not take."""

    def sample(
        self,
        logits: torch.Tensor,  # [num_tokens, vocab_size]
        expanded_idx_mapping: torch.Tensor,  # [num_tokens]
        *step_inputs,  # upstream's, ending in idx_mapping_np, pos, input_ids, expanded_local_pos
        return_logprobs: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        idx_mapping_np, pos = step_inputs[-4], step_inputs[-3]
        processed_logits = self.apply_sampling_params(
            logits, expanded_idx_mapping, *step_inputs, skip_top_k_top_p=True
        )
        states = self.sampling_states
        top_k, top_p = states.get_top_k_top_p(expanded_idx_mapping, idx_mapping_np)
        processed_returned = return_logprobs and self.logprobs_mode in PROCESSED_MODES
        # Upstream's rule for FlashInfer (sample/sampler.py of these releases).
        if (
            self.use_flashinfer
            and not (top_k is None and top_p is None)
            and not processed_returned
            and not states.any_greedy(idx_mapping_np)
            and not states.any_explicit_seed(idx_mapping_np)
        ):
            sampled = upstream.flashinfer_sample(processed_logits, top_k, top_p)
            return sampled.to(torch.int64), processed_logits
        return self.plugin_draw(
            processed_logits,
            expanded_idx_mapping,
            pos,
            top_k,
            top_p,
            processed_returned or getattr(self, "return_sampling_mask", False),
            mask=lambda logits: upstream.apply_top_k_top_p(logits, top_k, top_p),
        )
