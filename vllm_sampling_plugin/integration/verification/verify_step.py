"""The verify-step shape of the rejection seam (vLLM 0.32/0.33): upstream's
RejectionSampler whose ``_verify`` step is the plugin's, on engines whose
``plugin_verification`` is ``plugin`` (settings/defaults.py).

:class:`PluginVerifyingRejectionSampler` overrides only ``_verify_in_chunks``
(the per-batch decision, host-side reads only) and ``_verify`` for the
batches whose law ``rejection_sample_packed`` carries exactly: the
``standard`` method with n-gram drafts or draft logits, and either
temperature/min_p/top-k/top-p folded into the kernel (no float32 canvas), or
upstream's canvas for batches with logits processors where some request
uses top-k/top-p (top-k/top-p folded). Batches of greedy requests, and
n-gram drafts of a batch with a seeded request, are verified by matching
the Sampler's own draws of every logit (``ops/rejection/matching.py``).
Everything else (other methods, adaptive verification, a watermark key,
processed logprobs, a narrower draft vocabulary, processors without
top-k/top-p) is upstream's own code; docs/architecture.md has the whole
route and why.

The kernel's noise is the plugin's Philox streams, so tokens follow
upstream's law but are not upstream's tokens (the tests check the law).
"""

from __future__ import annotations

import itertools
import logging
import time
from typing import Any

import numpy as np
import torch
from vllm.v1.worker.gpu.spec_decode import rejection_sampler as upstream

from vllm_sampling_plugin import config as cfg
from vllm_sampling_plugin.integration.common.compile_variants import rejection_variant, representatives
from vllm_sampling_plugin.integration.common.log_once import log_once
from vllm_sampling_plugin.ops.rejection import accept_matching_drafts
from vllm_sampling_plugin.ops.rejection.launcher import rejection_sample_packed

logger = logging.getLogger("vllm.vllm_sampling_plugin")

# Upstream's logprobs modes computed on the processed logits (the canvas).
_PROCESSED_MODES = ("processed_logprobs", "processed_logits")
_NO_LOGPROBS = -1


def engine_config(spec_config: Any = None) -> Any:
    """The engine's VllmConfig (the runner builds its samplers under
    ``set_current_vllm_config``), or None."""
    from vllm.config import get_current_vllm_config_or_none

    return get_current_vllm_config_or_none()


def verification_setting(vllm_config: Any, spec_config: Any = None) -> str:
    """``plugin_verification`` as the front end stored it on the ModelConfig."""
    model_config = getattr(vllm_config, "model_config", None)
    if model_config is None and spec_config is not None:
        model_config = getattr(spec_config, "target_model_config", None)
    return getattr(model_config, cfg.VERIFICATION_ATTR, cfg.UPSTREAM)


def engine_fallback(vllm_config: Any, spec_config: Any = None) -> str | None:
    """Why an engine that asked for the plugin's verification keeps
    upstream's, or None where the plugin verifies (some of) its batches."""
    spec_config = spec_config or getattr(vllm_config, "speculative_config", None)
    if spec_config is None:
        return "no speculative decoding"
    method = getattr(spec_config, "rejection_sample_method", "standard")
    if method != "standard":
        return f"rejection_sample_method={method!r} (the plugin carries 'standard' only)"
    if getattr(spec_config, "enable_adaptive_verification", False):
        return "adaptive verification compacts the logits upstream's way"
    if getattr(vllm_config, "watermark_config", None) is not None:
        return "watermarked resampling (a watermark key)"
    model_config = getattr(vllm_config, "model_config", None) or getattr(
        spec_config, "target_model_config", None
    )
    if getattr(model_config, "return_sampling_mask", False):
        return "return_sampling_mask needs upstream's processed logits"
    return None


def plugin_verifies(vllm_config: Any) -> bool:
    """Whether the engine with ``vllm_config`` has its drafts verified by the
    plugin (the setting asks for it and no engine-level reason keeps upstream's)."""
    return (
        verification_setting(vllm_config) == cfg.PLUGIN
        and engine_fallback(vllm_config) is None
    )


class PluginVerifyingRejectionSampler(upstream.RejectionSampler):
    """Upstream's RejectionSampler whose verify step is the plugin's fused
    kernel for the batches it carries exactly (module docstring)."""

    # draw/noise.py asks the runner's class whether an engine's drafts are the plugin's.
    plugin_verifies = staticmethod(plugin_verifies)

    def __new__(cls, sampler, spec_config, device, *args, **kwargs):
        vllm_config = engine_config(spec_config)
        if verification_setting(vllm_config, spec_config) != cfg.PLUGIN:
            return upstream.RejectionSampler(sampler, spec_config, device, *args, **kwargs)
        reason = engine_fallback(vllm_config, spec_config)
        if reason is None and kwargs.get("watermark_key") is not None:
            reason = "watermarked resampling (a watermark key)"
        if reason is None and getattr(sampler, "return_sampling_mask", False):
            reason = "return_sampling_mask needs upstream's processed logits"
        if reason is not None:
            logger.info(
                "vllm-sampling-plugin verification: upstream's RejectionSampler "
                "verifies this engine's drafts: %s.",
                reason,
            )
            return upstream.RejectionSampler(sampler, spec_config, device, *args, **kwargs)
        return super().__new__(cls)

    def __init__(self, sampler, spec_config, device, *args, **kwargs):
        super().__init__(sampler, spec_config, device, *args, **kwargs)
        # Per request slot: processing beyond temperature/min_p/top-k/top-p.
        self.needs_processors = np.zeros(len(sampler.needs_logits_processing), dtype=bool)
        # The canvas has min_p applied already: the kernel's min_p is off
        # (a tensor, not None, so that it launches the filtered variant).
        self.min_p_off = torch.zeros_like(sampler.sampling_states.min_p.gpu)
        self.plugin_batch = False
        self.batches = {"plugin": 0, "upstream": 0}
        self._watch_requests(sampler)
        logger.info(
            "vllm-sampling-plugin verification: the plugin verifies the batches whose "
            "law its fused kernel or matching carries exactly (noise in %s Philox), "
            "upstream the others; --plugin-verification upstream keeps upstream's for "
            "every batch.",
            "FP64" if sampler.use_fp64_gumbel else "FP32",
        )

    def _watch_requests(self, sampler) -> None:
        """Record, per request slot, whether any logits processor or the
        thinking budget said it needs processing (wrapping the instances'
        ``add_request``, which upstream's ``Sampler.add_request`` calls)."""
        needs_processors = self.needs_processors

        def watching(state):
            original = state.add_request

            def add_request(req_idx, sampling_params):
                needs = original(req_idx, sampling_params)
                needs_processors[req_idx] |= bool(needs)
                return needs

            state.add_request = add_request

        for processor in sampler.logits_processors:
            watching(processor)
        watching(sampler.thinking_budget_state)
        sampler_add_request = sampler.add_request

        def add_request(req_idx, sampling_params):
            needs_processors[req_idx] = False
            return sampler_add_request(req_idx, sampling_params)

        sampler.add_request = add_request

    def batch_fallback(
        self,
        idx_mapping_np: np.ndarray,
        draft_logits: torch.Tensor | None,
        vocab_size: int,
        max_num_logprobs: int,
    ) -> str | None:
        """Why this batch is upstream's, or None; host-side reads only."""
        if max_num_logprobs != _NO_LOGPROBS and self.sampler.logprobs_mode in _PROCESSED_MODES:
            return "processed logprobs requested"
        if draft_logits is not None and draft_logits.shape[-1] != vocab_size:
            return "a draft vocabulary narrower than the target's"
        if (
            self.processed(idx_mapping_np)
            and not self.truncates(idx_mapping_np)
            and not self.matches_drafts(draft_logits, idx_mapping_np)
        ):
            # Upstream's canvas is all its work before its kernel here.
            return "a logits processor or thinking budget and no top-k/top-p"
        return None

    def processed(self, idx_mapping_np: np.ndarray) -> bool:
        """Whether a request of the batch has a logits processor or thinking budget."""
        return bool(np.any(self.needs_processors[idx_mapping_np]))

    def truncates(self, idx_mapping_np: np.ndarray) -> bool:
        """Whether a request of the batch samples with top-k or top-p."""
        states = self.sampler.sampling_states
        return bool(
            np.any(states.top_k.np[idx_mapping_np] < states.vocab_size)
            or np.any(states.top_p.np[idx_mapping_np] < 1.0)
        )

    def matches_drafts(self, draft_logits: torch.Tensor | None, idx_mapping_np: np.ndarray) -> bool:
        """Whether a batch the plugin verifies is verified by matching the
        Sampler's own draws (module docstring): every request greedy, or
        n-gram drafts and a request with an explicit seed."""
        states = self.sampler.sampling_states
        if bool(np.all(states.temperature.np[idx_mapping_np] == 0.0)):
            return True
        return draft_logits is None and states.any_explicit_seed(idx_mapping_np)

    def builds_canvas(self, draft_logits: torch.Tensor | None, idx_mapping_np: np.ndarray) -> bool:
        """Whether verifying this plugin batch copies its logits to a float32
        canvas: the Sampler's processing when matching, the logits
        processors' otherwise."""
        if self.matches_drafts(draft_logits, idx_mapping_np):
            return bool(np.any(self.sampler.needs_logits_processing[idx_mapping_np]))
        return self.processed(idx_mapping_np)

    def warm_up_verification(
        self,
        max_num_reqs: int,
        device: torch.device,
        logits_dtypes: tuple[torch.dtype, ...],
        slot_dtypes: tuple[torch.dtype, ...],
        draft_logits: torch.Tensor | None,
    ) -> int:
        """Compile, during the engine's profile run, every variant of the
        verification kernels the steps can launch, so that no request waits
        for a Triton compile; returns how many rows the Sampler's draws reach
        (matching draws every logit), which the warm-up seam warms the draw to.

        Upstream's own kernel warm-up (``warmup_kernels``) runs decode steps
        at one batch size, and with penalties, which are upstream's batches.
        A kernel's compile variant follows from the launch plan of its number
        of requests (one batch size per plan here, one logit per request),
        the logits' dtype (``_verify`` reads the runner's raw logits, in the
        model's dtype whatever the batch samples with, since the plugin skips
        upstream's float32 copy; ``logits_dtypes`` names float32 too, for
        models that emit it), whether the batch filters (one variant for
        every filter combination: ``_verify`` passes all three), whether the
        kernel applies the temperature (not on the float32 canvas of a batch
        with logits processors, which is always filtered), and, fixed per
        engine, the drafts' logits (``draft_logits``: the speculator's
        buffer, None for n-gram drafts) and the noise's precision. Greedy
        zero rows: the outputs are thrown away.
        """
        start = time.perf_counter()
        states = self.sampler.sampling_states
        vocab_size = states.vocab_size
        use_fp64 = self.sampler.use_fp64_gumbel
        sizes = representatives(
            max_num_reqs, lambda n: rejection_variant(n, vocab_size, use_fp64, device)
        )
        # One logit (the bonus position) per request: [: n + 1] are the
        # cu_num_logits of n requests.
        counts = torch.arange(max_num_reqs + 1, dtype=torch.int32, device=device)
        draft_tokens = torch.zeros(max_num_reqs, dtype=torch.int32, device=device)
        pos = torch.zeros(max_num_reqs, dtype=torch.int64, device=device)
        # (logits dtype, filtered, the kernel applies the temperature): the
        # raw logits in each dtype, and the processors' float32 canvas.
        variants = [
            (dtype, filtered, True)
            for dtype in dict.fromkeys(logits_dtypes)
            for filtered in (False, True)
        ] + [(torch.float32, True, False)]
        for (dtype, filtered, apply_temperature), slot_dtype in itertools.product(
            variants, dict.fromkeys(slot_dtypes)
        ):
            logits = torch.zeros(max_num_reqs, vocab_size, dtype=dtype, device=device)
            filters = self.filters(filtered)
            slots = counts[:max_num_reqs].to(slot_dtype)
            for n in sizes:
                rejection_sample_packed(
                    logits[:n],
                    draft_tokens[:n],
                    counts[: n + 1],
                    slots[:n],
                    pos[:n],
                    states.temperature.gpu,
                    states.seeds.gpu,
                    self.num_speculative_steps,
                    draft_logits,
                    None,
                    use_fp64=use_fp64,
                    apply_temperature=apply_temperature,
                    scale_draft_logits=True,
                    **filters,
                )
        # Matching (greedy batches, and seeded ones of n-gram drafts): one
        # variant, the output width is K + 1.
        accept_matching_drafts(pos[:1], draft_tokens[:1], counts[:2], self.num_speculative_steps)
        warmed = [
            f"rejection ({'draft logits' if draft_logits is not None else 'n-gram drafts'})",
            "matching",
        ]
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        logger.info(
            "vllm-sampling-plugin verification warm-up: compiled and ran %s on logits in "
            "%s, unfiltered and filtered, and on the float32 canvas of batches with logits "
            "processors, batch sizes %s, covering every batch size 1..%d, in %.1f s.",
            " and ".join(warmed),
            " and ".join(str(dtype).removeprefix("torch.") for dtype in dict.fromkeys(logits_dtypes)),
            sizes,
            max_num_reqs,
            time.perf_counter() - start,
        )
        return max_num_reqs * (1 + self.num_speculative_steps)

    def filters(self, filtered: bool) -> dict[str, torch.Tensor]:
        """The filter arguments of a batch: all three where some request
        filters (the kernels turn each off per row: one compile variant for
        every combination), none otherwise."""
        if not filtered:
            return {}
        states = self.sampler.sampling_states
        return {"top_k": states.top_k.gpu, "top_p": states.top_p.gpu, "min_p": states.min_p.gpu}

    def _verify_in_chunks(self, logits, input_batch, draft_logits, *rest):
        # rest: upstream's (draft_sampled, pos, max_chunk_logits, max_num_logprobs,
        # verify_draft_sampled).
        draft_sampled, pos, max_chunk_logits, max_num_logprobs, *verify_draft_sampled = rest
        max_chunk_logits = self.route_batch(
            input_batch.idx_mapping_np, draft_logits, logits, max_chunk_logits, max_num_logprobs
        )
        return super()._verify_in_chunks(
            logits, input_batch, draft_logits, draft_sampled, pos, max_chunk_logits,
            max_num_logprobs, *verify_draft_sampled,
        )

    def route_batch(
        self,
        idx_mapping_np: np.ndarray,
        draft_logits: torch.Tensor | None,
        logits: torch.Tensor,
        max_chunk_logits: int,
        max_num_logprobs: int,
        reason: str | None = None,
    ) -> int:
        """Decide whether the plugin verifies this batch (``reason``: an
        earlier one for upstream's path) and return the chunk size upstream's
        ``_verify_in_chunks`` should use."""
        if reason is None:
            reason = self.batch_fallback(idx_mapping_np, draft_logits, logits.shape[1], max_num_logprobs)
        self.plugin_batch = reason is None
        self.batches["plugin" if reason is None else "upstream"] += 1
        if reason is None and not self.builds_canvas(draft_logits, idx_mapping_np):
            # No canvas: one launch covers the batch. (A canvas keeps
            # upstream's chunks, which bound its size.)
            return max(max_chunk_logits, logits.shape[0])
        if reason is not None:
            log_once(
                logging.INFO,
                f"vllm-sampling-plugin verification: batches with {reason} are verified "
                "by upstream's code (logged once).",
            )
        return max_chunk_logits

    def _verify(self, logits, draft_logits, draft_sampled, *step_args):
        # step_args: upstream's (pos, cu_num_logits, idx_mapping, idx_mapping_np,
        # expanded_idx_mapping, expanded_local_pos, seq_lens_upper_bound_np,
        # verify_draft_sampled).
        if not self.plugin_batch:
            return super()._verify(logits, draft_logits, draft_sampled, *step_args)
        *rows, verify_draft_sampled = step_args
        return self.plugin_verify(verify_draft_sampled, logits, draft_logits, draft_sampled, *rows)

    def plugin_verify(
        self,
        verify_draft_sampled,
        logits,
        draft_logits,
        draft_sampled,
        pos,
        cu_num_logits,
        idx_mapping,
        idx_mapping_np,
        expanded_idx_mapping,
        expanded_local_pos,
        seq_lens_upper_bound_np,
    ):
        """The plugin's verification of a batch it carries: matching or the
        fused kernel. ``draft_logits``: the drafter's [max_num_reqs, k, V]
        tensor or None; ``verify_draft_sampled``: the drafts, invalid ones -1.
        Returns (the logits standing for the processed ones, sampled
        [num_reqs, k + 1] int64, num_sampled [num_reqs] int32)."""
        # The Sampler's arguments for these rows, the drafts as their input
        # ids (what the logits processors read), as upstream's _verify passes them.
        sampler_args = (
            logits,
            expanded_idx_mapping,
            idx_mapping,
            idx_mapping_np,
            pos,
            draft_sampled,
            expanded_local_pos,
            seq_lens_upper_bound_np,
        )
        if self.matches_drafts(draft_logits, idx_mapping_np):
            # A seeded request's tokens are the ones it draws without speculation.
            target_tokens, _ = self.sampler.sample(*sampler_args)
            sampled, num_sampled = accept_matching_drafts(
                target_tokens, verify_draft_sampled, cu_num_logits, self.num_speculative_steps
            )
            return logits, sampled, num_sampled
        states = self.sampler.sampling_states
        if self.processed(idx_mapping_np):
            # Upstream's float32 canvas: the processors, the thinking budget,
            # temperature and min_p, in its order; top-k/top-p (some request
            # uses them: batch_fallback) fold into the kernel.
            target = self.sampler.apply_sampling_params(*sampler_args, skip_top_k_top_p=True)
            apply_temperature = False
            filters = {**self.filters(True), "min_p": self.min_p_off}
        else:
            target = logits
            apply_temperature = True
            filters = self.filters(
                self.truncates(idx_mapping_np) or np.any(states.min_p.np[idx_mapping_np] > 0.0)
            )
        sampled, num_sampled = rejection_sample_packed(
            target,
            verify_draft_sampled,
            cu_num_logits,
            idx_mapping,
            pos,
            states.temperature.gpu,
            states.seeds.gpu,
            self.num_speculative_steps,
            draft_logits,
            None,
            use_fp64=self.sampler.use_fp64_gumbel,
            apply_temperature=apply_temperature,
            # The drafters cache their logits before the temperature.
            scale_draft_logits=True,
            **filters,
        )
        # int64 [num_reqs, k + 1] and int32 [num_reqs], as upstream's kernel
        # returns them. The logits returned stand for the processed ones:
        # nothing reads them on a plugin batch (processed logprobs and
        # sampling masks are upstream's).
        return target, sampled, num_sampled
