"""The V2 runner's RejectionSampler: exact verification for every method.

vLLM 0.20's ``rejection_sample_method`` keeps its meaning:

* ``strict`` and ``probabilistic`` run standard (probabilistic) verification.
  Drafts without draft logits (n-gram drafts, a point mass) are verified by
  matching (``ops/rejection/matching.py``): the Sampler draws every logit
  exactly as it would without speculation, seeded by the logit's position,
  and a draft is kept while those draws repeat it. Acceptance is ``p(draft)``
  and a rejection emits a token of the residual, as rejection sampling
  would; in addition every token is the one the request gets without
  speculation, so a seeded request reproduces whatever the scheduler did
  (preemption, batch-mates, how many drafts a step verified). Drafts with
  draft logits run the fused rejection kernel's standard mode.
* ``synthetic`` runs the synthetic mode of the fused kernel, which accepts at
  the configured rates but does the same work, so its timing is honest.

The target distribution is the Sampler's processed logits (penalties, bad
words, temperature, min-p, top-k/top-p). Logprobs and ``num_sampled`` are
produced as vLLM 0.20 produces them.
"""

from __future__ import annotations

import torch
from vllm.config import SpeculativeConfig
from vllm.v1.worker.gpu.input_batch import InputBatch
from vllm.v1.worker.gpu.metrics.logits import get_num_nans
from vllm.v1.worker.gpu.sample.output import SamplerOutput
from vllm.v1.worker.gpu.spec_decode.rejection_sampler import RejectionSampler

from vllm_sampling_plugin.ops.rejection import accept_matching_drafts, rejection_sample_packed


class PluginRejectionSampler(RejectionSampler):
    def __init__(self, sampler, spec_config: SpeculativeConfig, device: torch.device):
        super().__init__(sampler, spec_config, device)
        self.synthetic_mode = self.rejection_sample_method == "synthetic"

    def __call__(
        self,
        logits: torch.Tensor,
        input_batch: InputBatch,
        draft_logits: torch.Tensor | None = None,
    ) -> SamplerOutput:
        # Token at logit i of a request: the last sampled token for i = 0,
        # draft i - 1 afterwards.
        draft_sampled = input_batch.input_ids[input_batch.logits_indices]
        num_nans = get_num_nans(logits) if self.sampler.compute_nans else None
        pos = input_batch.positions[input_batch.logits_indices]
        # What the Sampler needs to process (and draw) every logit.
        sampler_inputs = (
            logits,
            input_batch.expanded_idx_mapping,
            input_batch.idx_mapping_np,
            pos,
            draft_sampled,
            input_batch.expanded_local_pos,
        )
        if self.verifies_by_matching(draft_logits):
            # The Sampler's own draw at every logit, then the drafts it repeats.
            target_tokens, processed_logits = self.sampler.sample(*sampler_inputs)
            sampled, num_sampled = accept_matching_drafts(
                target_tokens, draft_sampled, input_batch.cu_num_logits,
                self.num_speculative_steps,
            )
        else:
            processed_logits = self.sampler.apply_sampling_params(*sampler_inputs)
            sampled, num_sampled = self.draw(
                processed_logits,
                draft_sampled,
                input_batch.cu_num_logits,
                input_batch.idx_mapping,
                pos,
                draft_logits,
            )
        logprobs_tensors = self._get_logprobs_tensors(
            input_batch,
            sampled,
            num_sampled,
            processed_logits
            if self.sampler.logprobs_mode == "processed_logprobs"
            else logits,
        )
        return SamplerOutput(
            sampled_token_ids=sampled,
            logprobs_tensors=logprobs_tensors,
            num_nans=num_nans,
            num_sampled=num_sampled,
        )

    def verifies_by_matching(self, draft_logits: torch.Tensor | None) -> bool:
        """Whether drafts are verified by matching the Sampler's own draws
        (point-mass drafts outside synthetic mode) rather than by the fused
        rejection kernel."""
        return draft_logits is None and not self.synthetic_mode

    def draw(
        self,
        processed_logits: torch.Tensor,  # [num_logits, vocab_size] fp32
        draft_sampled: torch.Tensor,  # [num_logits]
        cu_num_logits: torch.Tensor,  # [num_reqs + 1] int32
        idx_mapping: torch.Tensor,  # [num_reqs] int32
        pos: torch.Tensor,  # [num_logits] int64
        draft_logits: torch.Tensor | None,  # [max_num_reqs, k, vocab_size]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(sampled, num_sampled)`` of the rejection kernel (also what the
        start-up warm-up runs)."""
        states = self.sampler.sampling_states
        return rejection_sample_packed(
            processed_logits,
            draft_sampled,
            cu_num_logits,
            idx_mapping=idx_mapping,
            pos=pos,
            temperature=states.temperature.gpu,
            seeds=states.seeds.gpu,
            num_speculative_steps=self.num_speculative_steps,
            draft_logits=None if self.synthetic_mode else draft_logits,
            synthetic_conditional_rates=self.synthetic_conditional_rates,
            use_fp64=self.sampler.use_fp64_gumbel,
        )
