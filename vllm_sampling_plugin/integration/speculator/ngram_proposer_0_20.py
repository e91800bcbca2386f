"""N-gram (prompt-lookup) speculator for vLLM 0.20's V2 GPU model runner.

``NgramProposerGPU`` fills the duck-typed speculator contract the V2 runner
relies on (``model_runner.py``: ``load_model``, ``.model``,
``supports_mm_inputs``, ``draft_logits``, ``init_cudagraph_manager``,
``set_attn``, ``propose`` in keyword and positional form, ``capture_model``).
Its drafts come from ``ops.ngram`` over the history the runner already keeps
(``RequestState.all_token_ids`` / ``total_len``), so a step costs two small
kernel launches, no host synchronisation and no allocation.

vLLM 0.20 builds the speculator before ``RequestState`` exists, so the runner
wrapper must call :meth:`NgramProposerGPU.bind` right after
``GPUModelRunner.__init__``. ``bind`` also moves ``all_token_ids`` from pinned
host memory (read over PCIe by every scan) into device memory; see
docs/ops-ngram.md for the memory this adds.
"""

from __future__ import annotations

from typing import Any

import torch

from vllm_sampling_plugin.integration.speculator.speculation_policy import is_adaptive
from vllm_sampling_plugin.ops.ngram import ngram_propose_into, ngram_scratch
from vllm_sampling_plugin.ops.ngram.launcher import NGRAM_MAX_N


def ngram_settings(speculative_config: Any) -> tuple[int, int, int]:
    """``(min_n, max_n, k)`` from a SpeculativeConfig; ValueError naming a bad field."""
    min_n = speculative_config.prompt_lookup_min
    max_n = speculative_config.prompt_lookup_max
    k = speculative_config.num_speculative_tokens
    if not isinstance(min_n, int) or min_n < 1:
        raise ValueError(
            "speculative_config.prompt_lookup_min must be an integer >= 1, "
            f"got {min_n!r}"
        )
    if not isinstance(max_n, int) or not min_n <= max_n <= NGRAM_MAX_N:
        raise ValueError(
            f"speculative_config.prompt_lookup_max must be an integer in "
            f"[prompt_lookup_min ({min_n}), {NGRAM_MAX_N}], got {max_n!r}"
        )
    if not isinstance(k, int) or k < 1:
        raise ValueError(
            "speculative_config.num_speculative_tokens must be an integer >= 1, "
            f"got {k!r}"
        )
    return min_n, max_n, k


class NgramProposerGPU:
    """Prompt-lookup drafts for the V2 runner, matching vLLM 0.20's CPU proposer.

    Every request in a step gets exactly ``k`` valid token ids: its n-gram
    proposal, then (and for requests without one) its last sampled token,
    which verification rejects unless the model agrees.
    """

    # Read by the runner on every step; n-gram drafting needs neither.
    supports_mm_inputs = False
    draft_logits = None

    def __init__(self, vllm_config: Any, device: torch.device):
        speculative_config = vllm_config.speculative_config
        if speculative_config is None:
            raise ValueError(
                "speculative_config must be set to use the n-gram speculator"
            )
        self.min_n, self.max_n, self.k = ngram_settings(speculative_config)
        # Under the adaptive policy the runner sends num_proposed() to the
        # scheduler with every output (integration/speculator/proposal_report.py).
        self.reports_proposals = is_adaptive(vllm_config)
        # The scheduler's plan for the current step (proposal_report.py).
        self.propose_this_step = True
        self.device = device
        self.max_num_reqs = vllm_config.scheduler_config.max_num_seqs
        # There is no draft model; the runner still reads `.model`.
        self.model = None
        self.req_states = None

        # Rows are batch positions. Zero-filled so that a dummy run returns
        # valid token ids without launching anything.
        self.drafts = torch.zeros(
            self.max_num_reqs, self.k, dtype=torch.int64, device=device
        )
        self.num_drafts = torch.zeros(
            self.max_num_reqs, dtype=torch.int32, device=device
        )
        self.scratch = ngram_scratch(self.max_num_reqs, device)
        # The first step's inputs are checked; later steps pass the same
        # persistent buffers and vLLM's tensors of the same dtypes, so their
        # checks (about 10 us of host time a step) are skipped.
        self.step_inputs_checked = False

    def bind(self, req_states: Any) -> None:
        """Attach the runner's ``RequestState``; call before any request is added.

        Moves ``req_states.all_token_ids`` into device memory when it is the
        pinned-host (UVA) buffer vLLM 0.20 allocates.
        """
        _move_history_to_device(req_states)
        self.req_states = req_states

    def load_model(self, target_model: Any) -> None:
        """No draft model to load."""

    def init_cudagraph_manager(self, cudagraph_mode: Any) -> None:
        """Nothing to capture: ``propose`` runs two kernels eagerly."""

    def set_attn(self, *args: Any, **kwargs: Any) -> None:
        """N-gram drafting needs no attention state."""

    def capture_model(self) -> None:
        """Nothing to capture (see ``init_cudagraph_manager``)."""

    @torch.inference_mode()
    def propose(
        self,
        input_batch: Any,
        attn_metadata: Any = None,
        slot_mappings: Any = None,
        last_hidden_states: torch.Tensor | None = None,
        aux_hidden_states: list[torch.Tensor] | None = None,
        # [num_reqs] int32, 0 for chunked-prefill entries
        num_sampled: torch.Tensor | None = None,
        num_rejected: torch.Tensor | None = None,
        # [max_num_reqs, 1] int64
        last_sampled: torch.Tensor | None = None,
        next_prefill_tokens: torch.Tensor | None = None,
        temperature: torch.Tensor | None = None,
        seeds: torch.Tensor | None = None,
        num_tokens_across_dp: torch.Tensor | None = None,
        dummy_run: bool = False,
        skip_attn_for_dummy_run: bool = False,
        mm_inputs: Any = None,
        is_profile: bool = False,
        **kwargs: Any,
    ) -> torch.Tensor:
        """Drafts ``[num_reqs, k]`` int64 for the step in ``input_batch``.

        Same parameters as vLLM 0.20's ``EagleSpeculator.propose``; only
        ``input_batch``, ``num_sampled`` and ``last_sampled`` are used. Runs
        after ``postprocess``, so the history already holds this step's
        accepted and bonus tokens. Dummy runs (profiling, warm-up) pass rows
        with stale history, and the adaptive policy's steps without proposal
        (``propose_this_step``) verify none of these drafts next; both
        return the buffer as it is, launching nothing.
        """
        num_reqs = input_batch.num_reqs
        if dummy_run or not self.propose_this_step:
            return self.drafts[:num_reqs]
        req_states = self.req_states
        if req_states is None:
            raise RuntimeError(
                "NgramProposerGPU.bind(req_states) must be called before propose"
            )
        fill_tokens = (
            last_sampled if last_sampled is not None else req_states.last_sampled_tokens
        )
        drafts = self.draft(
            input_batch.idx_mapping,
            num_sampled,
            fill_tokens,
            check_inputs=not self.step_inputs_checked,
        )
        self.step_inputs_checked = True
        return drafts

    def num_proposed(self, num_reqs: int) -> torch.Tensor:
        """``[num_reqs]`` int32: how many of the last ``propose``'s drafts
        are the n-gram's (the rest repeat the last sampled token)."""
        return self.num_drafts[:num_reqs]

    def draft(
        self,
        idx_mapping: torch.Tensor,  # [num_reqs] int32
        num_sampled: torch.Tensor | None,  # [num_reqs] int32
        fill_tokens: torch.Tensor,  # [max_num_reqs, 1] int64
        check_inputs: bool = True,
    ) -> torch.Tensor:
        """Drafts ``[num_reqs, k]`` of the n-gram kernels (also what the
        start-up warm-up runs); ``check_inputs=False`` skips the launcher's
        argument checks."""
        req_states = self.req_states
        return ngram_propose_into(
            req_states.all_token_ids.gpu,
            req_states.total_len.gpu,
            idx_mapping,
            self.drafts,
            self.num_drafts,
            self.scratch,
            min_n=self.min_n,
            max_n=self.max_n,
            # Read every step: the worker may lower it after start-up
            # (GPUModelRunner.update_max_model_len).
            max_model_len=req_states.max_model_len,
            num_sampled=num_sampled,
            fill_tokens=fill_tokens,
            check_inputs=check_inputs,
        )


def _move_history_to_device(req_states: Any) -> None:
    """Swap a UVA ``all_token_ids`` for a device StagedWriteTensor of the same shape.

    Every consumer in vLLM 0.20 (``model_runner``, ``input_batch``,
    ``sample/penalties``, ``sample/bad_words``, ``sample/prompt_logprob``)
    goes through ``req_states.all_token_ids`` and uses only ``.gpu``,
    ``stage_write`` and ``apply_write``, which both kinds provide.
    """
    history = req_states.all_token_ids
    if getattr(history, "_uva_buf", None) is None:
        return  # already in device memory
    if req_states.num_reqs > 0 or history._staged_write_indices:
        raise RuntimeError(
            "NgramProposerGPU.bind must run before any request is added: "
            "all_token_ids already holds request data"
        )
    from vllm.v1.worker.gpu.buffer_utils import StagedWriteTensor

    req_states.all_token_ids = StagedWriteTensor(
        tuple(history.gpu.shape),
        dtype=history.dtype,
        device=history.device,
        max_concurrency=history.max_concurrency,
    )
