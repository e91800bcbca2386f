"""Refuse, in the front-end, requests the V2 runner's per-request tables cannot hold.

vLLM 0.20's V2 Sampler keeps fixed-size per-request tables: at most 1,024
allowed token ids, 1,024 logit-bias entries, 128 stop tokens (read while
``min_tokens`` holds), 128 bad words of 1,024 tokens in all. A request over a
limit passes the front-end's checks and raises ``ValueError`` in the worker's
``add_request``, which takes the whole engine down with it: every request in
flight fails. Checked here instead, as the front-end checks everything else,
so the one request gets a 400 naming the field. The limits are read from the
V2 modules themselves. Only under ``VLLM_USE_V2_MODEL_RUNNER`` (the V1 runner
has no such tables).
"""

from __future__ import annotations

import functools

import vllm.envs as envs
from vllm.exceptions import VLLMValidationError
from vllm.sampling_params import SamplingParams
from vllm.v1.worker.gpu.sample import bad_words, logit_bias

_PATCHED = "_vllm_sampling_plugin_patched"


def patch_request_limits() -> None:
    if getattr(SamplingParams.update_from_tokenizer, _PATCHED, False):
        return
    SamplingParams.verify = _then(SamplingParams.verify, _check_requested_limits)
    # Stop tokens and bad-word tokens are only known once these have run.
    SamplingParams.update_from_generation_config = _then(
        SamplingParams.update_from_generation_config, _check_stop_token_limit
    )
    SamplingParams.update_from_tokenizer = _then(
        SamplingParams.update_from_tokenizer, _check_bad_words_limits
    )


def _then(method, check):
    @functools.wraps(method)
    def checked(self: SamplingParams, *args, **kwargs):
        result = method(self, *args, **kwargs)
        if envs.VLLM_USE_V2_MODEL_RUNNER:
            check(self)
        return result

    setattr(checked, _PATCHED, True)
    return checked


def _refuse_over(field: str, what: str, count: int, limit: int) -> None:
    if count > limit:
        raise VLLMValidationError(
            f"{field}: {count} {what}, more than the {limit} vLLM 0.20's V2 model runner "
            "can hold per request",
            parameter=field,
            value=count,
        )


def _check_requested_limits(params: SamplingParams) -> None:
    _refuse_over("allowed_token_ids", "token ids", len(params.allowed_token_ids or ()),
                 logit_bias.MAX_NUM_ALLOWED_TOKEN_IDS)
    _refuse_over("logit_bias", "entries", len(params.logit_bias or ()),
                 logit_bias.MAX_NUM_LOGIT_BIAS_TOKENS)


def _check_stop_token_limit(params: SamplingParams) -> None:
    if params.min_tokens > 0:
        _refuse_over("stop_token_ids", "stop tokens (with min_tokens)",
                     len(params.all_stop_token_ids), logit_bias.MAX_NUM_STOP_TOKEN_IDS)


def _check_bad_words_limits(params: SamplingParams) -> None:
    words = params.bad_words_token_ids or []
    _refuse_over("bad_words", "bad words (with their prefix-space variants)", len(words),
                 bad_words.MAX_NUM_BAD_WORDS)
    _refuse_over("bad_words", "bad-word tokens", sum(len(w) for w in words),
                 bad_words.MAX_BAD_WORDS_TOTAL_TOKENS)
