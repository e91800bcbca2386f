"""The plugin's verification on vLLM 0.34's RejectionSampler shape
(``VERIFY_STEP_OVER_DRAFT_LOGITS_CACHE``; the rejection seam binds it).

0.34 keeps 0.33's verify step but changes its contract, and this subclass
of :class:`PluginVerifyingRejectionSampler` adapts only that:

* draft logits arrive as a ``DraftLogitsCache``: its ``values``
  ``[max_num_reqs, k, V]`` are indexed by request slot, as 0.33's tensor
  was, where the cache is replicated (``row_mapping`` None); a sharded cache
  (batch-sharded sampling under tensor parallelism) stays upstream's;
* ``_verify`` takes no ``verify_draft_sampled``: a draft the grammar
  bitmask forbids has a -inf target logit, which neither the fused kernel
  nor matching ever accepts;
* ``_verify_in_chunks`` takes ``logprobs_dims`` (None: no logprobs);
* trace replay: where a request carries a trace, the verified tokens are
  overwritten with it, as upstream's ``_verify`` does.
"""

from __future__ import annotations

from vllm.v1.worker.gpu.spec_decode import rejection_sampler as upstream

from vllm_sampling_plugin.integration.verification.verify_step import (
    _NO_LOGPROBS,
    PluginVerifyingRejectionSampler,
)


def cached_draft_logits(draft_logits):
    """The ``[max_num_reqs, k, V]`` tensor of a replicated DraftLogitsCache,
    None for n-gram or suffix drafts (no cache)."""
    return None if draft_logits is None else draft_logits.values


class PluginVerifyingDraftCacheRejectionSampler(PluginVerifyingRejectionSampler):
    """:class:`PluginVerifyingRejectionSampler` on 0.34's verify contract."""

    def warm_up_verification(self, max_num_reqs, device, logits_dtypes, slot_dtypes, draft_logits):
        return super().warm_up_verification(
            max_num_reqs, device, logits_dtypes, slot_dtypes, cached_draft_logits(draft_logits)
        )

    def _verify_in_chunks(self, logits, input_batch, draft_logits, draft_sampled, pos, *rest):
        # rest: upstream's (max_chunk_logits, logprobs_dims).
        max_chunk_logits, logprobs_dims = rest
        sharded = draft_logits is not None and draft_logits.row_mapping is not None
        max_chunk_logits = self.route_batch(
            input_batch.idx_mapping_np,
            cached_draft_logits(draft_logits),
            logits,
            max_chunk_logits,
            _NO_LOGPROBS if logprobs_dims is None else logprobs_dims[0],
            "a draft-logits cache sharded across ranks" if sharded else None,
        )
        return upstream.RejectionSampler._verify_in_chunks(
            self, logits, input_batch, draft_logits, draft_sampled, pos, max_chunk_logits, logprobs_dims
        )

    def _verify(self, logits, draft_logits, draft_sampled, *step_args):
        # step_args: upstream's (pos, cu_num_logits, idx_mapping, idx_mapping_np,
        # expanded_idx_mapping, expanded_local_pos, seq_lens_upper_bound_np).
        if not self.plugin_batch:
            return upstream.RejectionSampler._verify(
                self, logits, draft_logits, draft_sampled, *step_args
            )
        target, sampled, num_sampled = self.plugin_verify(
            draft_sampled, logits, cached_draft_logits(draft_logits), draft_sampled, *step_args
        )
        trace = self.sampler.trace_replay_state
        if trace is not None:
            _, cu_num_logits, idx_mapping = step_args[:3]
            trace.apply_trace_to_verified(sampled, num_sampled, draft_sampled, cu_num_logits, idx_mapping)
        return target, sampled, num_sampled
