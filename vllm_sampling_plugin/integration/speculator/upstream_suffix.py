"""Proposal counts from upstream's GPU suffix speculator (vLLM 0.34).

0.34's ``SuffixSpeculator`` (``spec_decode/suffix/speculator.py``) writes k
drafts for every request, filling the slots past its match with the last
sampled token, and upstream verifies all k, which at high concurrency costs
more than a request without a match gains. Its finalize kernel already
counts the real drafts of each batch row (``num_valid``, int32, a prefix of the k slots), so the adaptive policy
reads that count (speculator/proposal_report.py) and a request without a
match verifies nothing beyond its own token. On a step the policy plans
without proposal the subclass returns its buffer and launches nothing; the
corpus of finished responses is still fed (``on_requests_finished`` is
upstream's).
"""

from __future__ import annotations

from typing import Any

import torch

from vllm_sampling_plugin.integration.speculator.speculation_policy import cover_method, is_adaptive

SUFFIX_METHOD = "suffix"


def reporting_suffix_speculator(upstream_cls: type) -> type:
    """``upstream_cls`` (upstream's ``SuffixSpeculator``) with ``num_proposed``."""

    class ReportingSuffixSpeculator(upstream_cls):
        def __init__(self, vllm_config: Any, device: torch.device, req_states: Any):
            super().__init__(vllm_config, device, req_states)
            # Under "fixed" the speculator runs exactly as upstream's.
            self.reports_proposals = is_adaptive(vllm_config)
            # The scheduler's plan for the current step (proposal_report.py).
            self.propose_this_step = True

        @torch.inference_mode()
        def propose(self, input_batch: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
            if not self.propose_this_step:
                # The next step verifies none of these drafts.
                return self.drafts[: input_batch.num_reqs]
            return super().propose(input_batch, *args, **kwargs)

        def num_proposed(self, num_reqs: int) -> torch.Tensor:
            """``[num_reqs]`` int32: the real drafts of the last ``propose``,
            in batch order (the rest repeat the last sampled token)."""
            return self.num_valid[:num_reqs]

    ReportingSuffixSpeculator.__name__ = ReportingSuffixSpeculator.__qualname__ = (
        f"Reporting{upstream_cls.__name__}"
    )
    return ReportingSuffixSpeculator


def patch_upstream_suffix() -> None:
    """Bind the reporting subclass where the speculator registry resolves
    ``SuffixSpeculator`` from, and let the policy run over ``"suffix"``;
    idempotent."""
    import vllm.v1.worker.gpu.spec_decode.suffix.speculator as suffix

    if not hasattr(suffix.SuffixSpeculator, "num_proposed"):
        suffix.SuffixSpeculator = reporting_suffix_speculator(suffix.SuffixSpeculator)
    cover_method(SUFFIX_METHOD)
