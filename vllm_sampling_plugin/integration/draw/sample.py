"""The V2 runner's Sampler, with the plugin's sampling step.

Everything vLLM's Sampler does before drawing the token (penalties, bad
words, temperature, min-p) and after it (logprobs, NaN counts) stays vLLM's,
except two states: allowed ids / logit bias / min-tokens run the plugin's
race-free kernel (``logit_bias.py``), and bad words read each draft where it
is (``spec_bad_words.py``). What changes is the draw:

* rows without top-k/top-p: the plugin's Gumbel-max kernel (FP32 by default,
  FP64 with ``use_fp64_gumbel``);
* batches with top-k/top-p that FlashInfer can honour (no greedy row, no
  explicit seed, no processed logprobs): FlashInfer, when selected;
* other batches with top-k/top-p: the plugin's fused top-k/top-p kernel,
  or, when processed logprobs need the masked logits, the mask followed by
  the Gumbel-max kernel.
"""

from __future__ import annotations

import enum
import logging

import numpy as np
import torch
from vllm.config import get_current_vllm_config_or_none
from vllm.sampling_params import SamplingParams
from vllm.v1.worker.gpu.sample.sampler import Sampler
from vllm.v1.worker.gpu.sample.states import NO_LOGPROBS, SamplingStates

from vllm_sampling_plugin.config import PluginSettings, settings_from_model_config
from vllm_sampling_plugin.integration.draw.sample_logit_bias import RaceFreeLogitBiasState
from vllm_sampling_plugin.integration.draw.noise import (
    PLUGIN_FP32_STREAM,
    fp32_noise,
    upstream_sampler_instead,
)
from vllm_sampling_plugin.integration.draw.sample_bad_words import DraftAlignedBadWordsState
from vllm_sampling_plugin.ops.gumbel import gumbel_sample
from vllm_sampling_plugin.ops.masking import mask_top_k_top_p_
from vllm_sampling_plugin.ops.topk_topp import top_k_top_p_sample
from vllm_sampling_plugin.ops.topk_topp.flashinfer import flashinfer_top_k_top_p_sample
from vllm_sampling_plugin.selection import use_flashinfer_sampler

logger = logging.getLogger("vllm.vllm_sampling_plugin")


class Route(enum.Enum):
    GUMBEL = "gumbel"
    FLASHINFER = "flashinfer"
    FUSED_TOP_K_TOP_P = "fused_top_k_top_p"
    MASKED_TOP_K_TOP_P = "masked_top_k_top_p"


class PluginSamplingStates(SamplingStates):
    """vLLM's per-request sampling state, plus which seeds were explicit.

    vLLM 0.20 draws a random seed for requests without one, so whether the user
    set it is recorded here: FlashInfer ignores per-request seeds, and seeded
    requests must stay on the plugin's (seed, position) noise.
    """

    def __init__(self, max_num_reqs: int, vocab_size: int):
        super().__init__(max_num_reqs, vocab_size)
        self.has_explicit_seed = np.zeros(max_num_reqs, dtype=bool)
        # Set by the sampler while it applies the other sampling parameters
        # for a route that applies top-k/top-p itself.
        self.top_k_top_p_deferred = False

    def add_request(self, req_idx: int, sampling_params: SamplingParams) -> None:
        super().add_request(req_idx, sampling_params)
        self.has_explicit_seed[req_idx] = sampling_params.seed is not None

    def uses_top_k_top_p(self, idx_mapping_np: np.ndarray) -> bool:
        return bool(
            np.any(self.top_k.np[idx_mapping_np] != self.vocab_size)
            or np.any(self.top_p.np[idx_mapping_np] != 1.0)
        )

    def apply_top_k_top_p(
        self,
        logits: torch.Tensor,
        expanded_idx_mapping: torch.Tensor,
        idx_mapping_np: np.ndarray,
    ) -> torch.Tensor:
        if self.top_k_top_p_deferred or not self.uses_top_k_top_p(idx_mapping_np):
            return logits
        return mask_top_k_top_p_(
            logits,
            self.top_k.gpu[expanded_idx_mapping],
            self.top_p.gpu[expanded_idx_mapping],
        )


class PluginSampler(Sampler):
    # The FP32 noise stream (the draw seam's noise.py picks it per engine).
    fp32_stream = PLUGIN_FP32_STREAM

    def __new__(cls, *args, settings: PluginSettings | None = None, **kwargs):
        # 0.21/0.22: an engine whose seeded draws only upstream's noise keeps
        # reproducible stays upstream's (noise.py); 0.20 never does (the
        # plugin verifies drafts there).
        sampler = upstream_sampler_instead(Sampler, get_current_vllm_config_or_none(), args, kwargs)
        return sampler if sampler is not None else super().__new__(cls)

    def __init__(
        self,
        max_num_reqs: int,
        vocab_size: int,
        device: torch.device,
        req_states,
        logprobs_mode="raw_logprobs",
        num_speculative_tokens: int = 1,
        settings: PluginSettings | None = None,
        **upstream_settings,
    ):
        # upstream_settings: what a release's runner adds (0.22's
        # use_fp64_gumbel), passed on to its Sampler.
        super().__init__(
            max_num_reqs=max_num_reqs,
            vocab_size=vocab_size,
            device=device,
            req_states=req_states,
            logprobs_mode=logprobs_mode,
            num_speculative_tokens=num_speculative_tokens,
            **upstream_settings,
        )
        self.sampling_states = PluginSamplingStates(max_num_reqs, vocab_size)
        self.logit_bias_state = RaceFreeLogitBiasState(max_num_reqs, device)
        self.bad_words_state = DraftAlignedBadWordsState(req_states)
        # The worker builds the runner inside set_current_vllm_config().
        vllm_config = get_current_vllm_config_or_none()
        if settings is None:
            settings = settings_from_model_config(
                getattr(vllm_config, "model_config", None)
            )
        # Upstream's setting where the release has one, else the plugin's flag.
        self.use_fp64_gumbel = upstream_settings.get("use_fp64_gumbel", settings.use_fp64_gumbel)
        self.use_flashinfer = use_flashinfer_sampler(settings.flashinfer_sampler)
        # The Gumbel kernel's inputs are checked on the first step that draws
        # with it; later steps pass tensors of the same dtypes, devices and
        # roles, so their checks (a few microseconds of host time) are skipped.
        self.gumbel_inputs_checked = False
        # The draw seam's noise.py (engines whose FP32 noise would differ from
        # upstream's RejectionSampler's never get here: __new__).
        self.fp32_stream, fp32_note = fp32_noise(vllm_config)
        logger.info(
            "vllm-sampling-plugin sampler: Gumbel-max noise in %s.",
            "FP64" if self.use_fp64_gumbel else f"{fp32_note} (--use-fp64-gumbel for FP64)",
        )

    def route(self, idx_mapping_np: np.ndarray) -> Route:
        """Which kernel draws this batch's tokens (decided on the host)."""
        states = self.sampling_states
        if not states.uses_top_k_top_p(idx_mapping_np):
            return Route.GUMBEL
        if (
            self.logprobs_mode == "processed_logprobs"
            and states.max_num_logprobs(idx_mapping_np) != NO_LOGPROBS
        ):
            # The returned processed logits must carry the top-k/top-p mask.
            return Route.MASKED_TOP_K_TOP_P
        if (
            self.use_flashinfer
            and not np.any(states.temperature.np[idx_mapping_np] == 0.0)
            and not np.any(states.has_explicit_seed[idx_mapping_np])
        ):
            return Route.FLASHINFER
        return Route.FUSED_TOP_K_TOP_P

    def apply_sampling_params(
        self,
        logits: torch.Tensor,
        expanded_idx_mapping: torch.Tensor,
        idx_mapping_np: np.ndarray,
        pos: torch.Tensor,
        input_ids: torch.Tensor,
        expanded_local_pos: torch.Tensor,
        *,
        top_k_top_p: bool = True,
    ) -> torch.Tensor:
        """vLLM's processing; ``top_k_top_p=False`` leaves the top-k/top-p
        mask to a kernel that applies it while sampling."""
        states = self.sampling_states
        states.top_k_top_p_deferred = not top_k_top_p
        try:
            return super().apply_sampling_params(
                logits,
                expanded_idx_mapping,
                idx_mapping_np,
                pos,
                input_ids,
                expanded_local_pos,
            )
        finally:
            states.top_k_top_p_deferred = False

    def sample(
        self,
        logits: torch.Tensor,
        expanded_idx_mapping: torch.Tensor,
        idx_mapping_np: np.ndarray,
        pos: torch.Tensor,
        input_ids: torch.Tensor,
        expanded_local_pos: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        route = self.route(idx_mapping_np)
        processed_logits = self.apply_sampling_params(
            logits,
            expanded_idx_mapping,
            idx_mapping_np,
            pos,
            input_ids,
            expanded_local_pos,
            top_k_top_p=route is Route.MASKED_TOP_K_TOP_P,
        )
        draws_with_gumbel = route in (Route.GUMBEL, Route.MASKED_TOP_K_TOP_P)
        tokens = self.draw(
            route,
            processed_logits,
            expanded_idx_mapping,
            pos,
            check_inputs=not (draws_with_gumbel and self.gumbel_inputs_checked),
        )
        self.gumbel_inputs_checked |= draws_with_gumbel
        return tokens, processed_logits

    def draw(
        self,
        route: Route,
        processed_logits: torch.Tensor,  # [num_tokens, vocab_size] fp32
        expanded_idx_mapping: torch.Tensor,  # [num_tokens] int32
        pos: torch.Tensor,  # [num_tokens] int64
        check_inputs: bool = True,
    ) -> torch.Tensor:
        """The tokens of ``route``'s kernel (also what the start-up warm-up
        runs); ``check_inputs=False`` skips the Gumbel launcher's argument
        checks (the other routes always check)."""
        states = self.sampling_states
        if route is Route.FLASHINFER:
            return flashinfer_top_k_top_p_sample(
                processed_logits,
                states.top_k.gpu[expanded_idx_mapping],
                states.top_p.gpu[expanded_idx_mapping],
            )
        if route is Route.FUSED_TOP_K_TOP_P:
            return top_k_top_p_sample(
                processed_logits,
                expanded_idx_mapping,
                states.temperature.gpu,
                states.seeds.gpu,
                pos,
                states.top_k.gpu,
                states.top_p.gpu,
                apply_temperature=False,
                use_fp64=self.use_fp64_gumbel,
                fp32_stream=self.fp32_stream,
            )
        return gumbel_sample(
            processed_logits,
            expanded_idx_mapping,
            states.temperature.gpu,
            states.seeds.gpu,
            pos,
            apply_temperature=False,
            use_fp64=self.use_fp64_gumbel,
            fp32_stream=self.fp32_stream,
            check_inputs=check_inputs,
        )
