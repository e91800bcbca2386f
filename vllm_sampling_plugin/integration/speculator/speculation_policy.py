"""Scheduler side of the adaptive speculation policy: the policy's decisions
(vllm_sampling_plugin/policy.py) wired into vLLM's scheduler.

vLLM gives every decoding request ``num_speculative_tokens`` (k) draft
slots every step (``AsyncScheduler._update_after_schedule`` sets k
placeholders; with synchronous scheduling ``take_draft_token_ids`` returns
k placeholders), so each request runs 1 + k tokens through the model
whether or not the n-gram proposer found anything. The scheduler already
handles requests with fewer draft tokens than k, and the V2 runner sizes
each request's logits from ``len(scheduled_spec_decode_tokens[req])``, so
the policy writes its decision where the scheduler reads it next:
``request.spec_token_ids`` (placeholders of the decided length, or the real
drafts trimmed to it). The wrapped methods are the same on 0.20 and 0.32 to
0.34. ``fixed`` leaves vLLM's behaviour untouched.

With async scheduling the step after the next is already scheduled when a
step's output arrives, so a decision uses the proposal one step older than
the drafts it verifies. After a step the policy plans without proposal the
next step verifies nothing (its placeholders are empty), so stale drafts are
never verified.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from vllm_sampling_plugin import config as cfg
from vllm_sampling_plugin.policy import REQUEST_DEFAULTS, AdaptiveSpeculation

logger = logging.getLogger("vllm.vllm_sampling_plugin")


# The speculative methods whose proposers report their drafts: n-gram (the
# plugin's on 0.20, upstream's from 0.32), and suffix where the speculator
# seam adds its report (0.34: speculator/upstream_suffix.py).
_REPORTING_METHODS = set(cfg.NGRAM_METHODS)


def cover_method(method: str) -> None:
    """Let the policy run over ``method``, whose proposer now reports."""
    _REPORTING_METHODS.add(method)


def runs_ngram(vllm_config: Any) -> bool:
    """Whether ``vllm_config`` speculates with a proposer that reports its
    drafts (n-gram; suffix on 0.34) and leaves verification's length to the
    scheduler (upstream's adaptive verification trims it itself)."""
    spec = vllm_config.speculative_config
    return (
        spec is not None
        and spec.method in _REPORTING_METHODS
        and not getattr(spec, "enable_adaptive_verification", False)
    )


def is_adaptive(vllm_config: Any) -> bool:
    """Whether the adaptive policy runs: a reporting proposer under
    ``speculation_policy="adaptive"`` (the scheduler's decisions, the
    proposal reports and the one-token decode graphs all follow this)."""
    settings = cfg.settings_from_model_config(vllm_config.model_config)
    return runs_ngram(vllm_config) and settings.speculation_policy == cfg.ADAPTIVE


def adaptive_speculation_for(vllm_config: Any) -> AdaptiveSpeculation | None:
    """The policy for a scheduler built from ``vllm_config``, or None (vLLM's
    behaviour): only for a reporting proposer under ``adaptive``."""
    spec = vllm_config.speculative_config
    if spec is None or spec.method not in _REPORTING_METHODS:
        return None
    k, kind = spec.num_speculative_tokens, _kind_of_drafts(spec.method)
    if not runs_ngram(vllm_config):
        logger.info(
            "vllm-sampling-plugin speculation policy: upstream's adaptive "
            "verification decides how many %s draft tokens are verified.", kind,
        )
        return None
    if not is_adaptive(vllm_config):
        logger.info(
            "vllm-sampling-plugin speculation policy: fixed (every request "
            "verifies %d %s draft tokens every step).", k, kind,
        )
        return None
    logger.info(
        "vllm-sampling-plugin speculation policy: adaptive (a request verifies "
        "the %s tokens proposed for it, at most %d, as many as its acceptance "
        "pays for at the step's batch size; --speculation-policy fixed verifies "
        "%d always).", kind, k, k,
    )
    return AdaptiveSpeculation(k, kind)


def _kind_of_drafts(method: str) -> str:
    return "n-gram" if method in cfg.NGRAM_METHODS else method


def patch_scheduler(scheduler_cls: type, async_scheduler_cls: type, request_cls: type) -> None:
    """Wrap ``Scheduler.__init__``, ``update_from_output`` and
    ``update_draft_token_ids`` (inherited by AsyncScheduler), and
    ``AsyncScheduler._update_after_schedule``."""
    if scheduler_cls.__dict__.get("_vllm_sampling_plugin_patched", False):
        return
    scheduler_cls.__init__ = _choosing_policy(scheduler_cls.__init__)
    scheduler_cls.update_from_output = _observing(scheduler_cls.update_from_output)
    scheduler_cls.update_draft_token_ids = _trimming(scheduler_cls.update_draft_token_ids)
    scheduler_cls._vllm_sampling_plugin_patched = True
    async_scheduler_cls._update_after_schedule = _planning(
        async_scheduler_cls._update_after_schedule
    )
    for name, value in REQUEST_DEFAULTS.items():
        setattr(request_cls, name, value)


def _choosing_policy(init):
    @functools.wraps(init)
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        self.adaptive_speculation = adaptive_speculation_for(self.vllm_config)

    return __init__


def _planning(update_after_schedule):
    """Wrap ``AsyncScheduler._update_after_schedule``, which gives every
    decoding request of a step the placeholders of the next one: after a
    step without proposal they are empty."""

    @functools.wraps(update_after_schedule)
    def wrapper(self, scheduler_output):
        policy = self.adaptive_speculation
        if policy is None or policy.plan(scheduler_output):
            return update_after_schedule(self, scheduler_output)
        # 0.33 and 0.34 size the placeholders from the output (and their
        # runner tells the proposer that length); 0.20 and 0.33 keep one list
        # on the scheduler, which 0.34 builds afresh each step.
        if hasattr(scheduler_output, "num_spec_tokens_to_schedule"):
            scheduler_output.num_spec_tokens_to_schedule = 0
        if not hasattr(self, "_spec_token_placeholders"):
            return update_after_schedule(self, scheduler_output)
        placeholders = self._spec_token_placeholders
        self._spec_token_placeholders = policy.placeholders[0]
        try:
            return update_after_schedule(self, scheduler_output)
        finally:
            self._spec_token_placeholders = placeholders

    return wrapper


def _observing(update_from_output):
    @functools.wraps(update_from_output)
    def wrapper(self, scheduler_output, model_runner_output):
        outputs = update_from_output(self, scheduler_output, model_runner_output)
        policy = self.adaptive_speculation
        if policy is not None:
            policy.observe(self.requests, scheduler_output, model_runner_output)
        return outputs

    return wrapper


def _trimming(update_draft_token_ids):
    @functools.wraps(update_draft_token_ids)
    def wrapper(self, draft_token_ids):
        update_draft_token_ids(self, draft_token_ids)
        policy = self.adaptive_speculation
        if policy is not None:
            policy.trim(self.requests, draft_token_ids.req_ids)

    return wrapper
