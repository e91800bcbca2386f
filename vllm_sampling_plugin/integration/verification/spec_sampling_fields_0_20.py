"""Accept ``min_p`` and ``logit_bias`` with speculative decoding on the V2 runner.

vLLM 0.20 refuses both whenever speculative decoding is on
(``SamplingParams._validate_spec_decode``, in the front-end). Under
``VLLM_USE_V2_MODEL_RUNNER`` the drafts are verified by the plugin's
RejectionSampler (``register.py``), which runs the Sampler's own processing
on every target logit before the rejection kernel: logit bias, allowed ids,
min-tokens, penalties, bad words, temperature, min-p and top-k/top-p, each
at that logit's position and with the drafts before it counted, exactly as
a step without drafts would. Accepted and corrected tokens then follow that
processed distribution, so both fields are exact there and the refusal is
lifted. Under the V1 runner the plugin verifies nothing and vLLM's refusal
(a 400 naming both fields) stays.
"""

from __future__ import annotations

import copy
import functools
import logging

import vllm.envs as envs
from vllm.sampling_params import SamplingParams

from vllm_sampling_plugin.integration.common.log_once import log_once

_PATCHED = "_vllm_sampling_plugin_patched"


def patch_spec_decode_validation() -> None:
    validate = SamplingParams._validate_spec_decode
    if getattr(validate, _PATCHED, False):
        return
    SamplingParams._validate_spec_decode = _lifting_min_p_and_logit_bias(validate)


def plugin_verifies_drafts() -> bool:
    """Whether the plugin's RejectionSampler is the one verifying drafts."""
    return bool(envs.VLLM_USE_V2_MODEL_RUNNER)


def _lifting_min_p_and_logit_bias(validate):
    @functools.wraps(validate)
    def _validate_spec_decode(self: SamplingParams, speculative_config) -> None:
        if speculative_config is None or not plugin_verifies_drafts():
            return validate(self, speculative_config)
        if self.min_p or self.logit_bias:
            log_once(
                logging.INFO,
                "vllm-sampling-plugin: min_p and logit_bias are accepted with "
                "speculative decoding; the plugin's rejection sampler applies them "
                "to the target distribution.",
            )
        # vLLM's other spec-decode checks (if a 0.20.x release adds any) still
        # run: only the two fields the plugin applies are hidden from them.
        validate(_without_min_p_and_logit_bias(self), speculative_config)

    setattr(_validate_spec_decode, _PATCHED, True)
    return _validate_spec_decode


def _without_min_p_and_logit_bias(params: SamplingParams) -> SamplingParams:
    shown = copy.copy(params)
    shown.min_p = 0.0
    shown.logit_bias = None
    return shown
