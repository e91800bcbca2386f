"""Proposal counts from upstream's GPU n-gram proposer (vLLM 0.32 and 0.33).

The adaptive speculation policy sends the scheduler, with every output, how
many drafts the proposer really found for each request
(integration/speculator/proposal_report.py reads ``speculator.num_proposed(num_reqs)``
when ``speculator.reports_proposals`` is set). On these lines the V2 runner
builds upstream's ``NgramGPUSpeculator`` (``spec_decode/__init__.py:87-92`` of
the 0.33.0 wheel, imported from ``spec_decode/ngram/speculator.py`` when the
speculator is built), which writes k drafts for every request and keeps no
count: its finalize kernel fills the slots past a match, and every slot of a
request without one, with the last sampled token (``ngram/speculator.py:
139-148``).

What it keeps is its scan's result, ``scratch[b, block]``: each block's best
match packed as ``n * (max_model_len + 1) + pos + 1``, 0 for none
(``:82-87``); rows that sampled nothing score 0 in every block (``:42-50``).
The finalize kernel reduces it to ``draft_start = pos + n`` and
``tokens_avail = total_len - draft_start`` (``:120-139``). The subclass below
repeats that reduction after ``propose``, on the same stream, in one kernel
over ``[num_reqs]`` (``ops.ngram.count_packed_matches_``): the count is
``min(tokens_avail, k)`` for a match and 0 otherwise, with no host sync. On
a step the adaptive policy plans without proposal it returns its buffer and
launches nothing (proposal_report.py). Everything
else about the proposer is upstream's. tests/integration/test_line_0_33.py
runs upstream's kernels in Triton's interpreter and checks these counts
against the drafts they write, which would catch a change of the packing.
"""

from __future__ import annotations

from typing import Any

import torch

from vllm_sampling_plugin.integration.speculator.speculation_policy import is_adaptive
from vllm_sampling_plugin.ops.ngram import count_packed_matches_


def reporting_ngram_speculator(upstream_cls: type) -> type:
    """``upstream_cls`` (upstream's ``NgramGPUSpeculator``) with ``num_proposed``."""

    class ReportingNgramSpeculator(upstream_cls):
        def __init__(self, vllm_config: Any, device: torch.device, req_states: Any):
            super().__init__(vllm_config, device, req_states)
            # Only the adaptive policy reads the counts; under "fixed" the
            # proposer runs exactly as upstream's.
            self.reports_proposals = is_adaptive(vllm_config)
            # The scheduler's plan for the current step (proposal_report.py).
            self.propose_this_step = True
            self.num_drafts = torch.zeros(
                self.max_num_reqs, dtype=torch.int32, device=device
            )

        @torch.inference_mode()
        def propose(self, input_batch: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
            if not self.propose_this_step:
                # The next step verifies none of these drafts (the runner
                # also marks them -1); upstream's scan would find what the
                # policy does not use.
                return self.drafts[: input_batch.num_reqs]
            drafts = super().propose(input_batch, *args, **kwargs)
            # Dummy runs (profiling, warm-up) launch no scan, so scratch is stale.
            if self.reports_proposals and not kwargs.get("dummy_run", False):
                self._count(input_batch)
            return drafts

        def num_proposed(self, num_reqs: int) -> torch.Tensor:
            """``[num_reqs]`` int32: how many of the last ``propose``'s drafts
            are n-gram matches (the rest repeat the last sampled token)."""
            return self.num_drafts[:num_reqs]

        def _count(self, input_batch: Any) -> None:
            count_packed_matches_(
                self.num_drafts,
                self.scratch,
                input_batch.idx_mapping,
                self.req_states.total_len.gpu,
                max_len=self.max_model_len,
                k=self.num_speculative_steps,
            )

    ReportingNgramSpeculator.__name__ = ReportingNgramSpeculator.__qualname__ = (
        f"Reporting{upstream_cls.__name__}"
    )
    return ReportingNgramSpeculator


def patch_upstream_ngram() -> None:
    """Bind the reporting subclass where ``init_speculator`` imports the
    proposer from when it builds one; idempotent."""
    import vllm.v1.worker.gpu.spec_decode.ngram.speculator as ngram

    if not hasattr(ngram.NgramGPUSpeculator, "num_proposed"):
        ngram.NgramGPUSpeculator = reporting_ngram_speculator(ngram.NgramGPUSpeculator)
