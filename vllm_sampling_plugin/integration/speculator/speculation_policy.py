"""Scheduler side of the adaptive speculation policy: verify what was proposed.

vLLM gives every decoding request ``num_speculative_tokens`` (k) draft
slots every step (``AsyncScheduler._update_after_schedule`` sets k
placeholders; with synchronous scheduling ``take_draft_token_ids`` returns
k placeholders), so each request runs 1 + k tokens through the model
whether or not the n-gram proposer found anything. On text that does not
repeat, that made n-gram speculation 0.36x of none at 256 sequences on an
H100 (docs/benchmarks.md).

Under the ``adaptive`` policy a request verifies

    min(proposed, cap)

draft tokens, where ``proposed`` is how many tokens the proposer found for
it in the latest step whose output has arrived (integration/speculator/proposal_report.py)
and ``cap`` follows the request's acceptance: it doubles (up to k) after a
step that accepted every verified draft and falls to one more than the
accepted run after a step that rejected one. A request without a proposal therefore
runs one token, as without speculation; one whose proposals are accepted
keeps k. The scheduler already handles requests with fewer draft tokens than
k (budget and max_model_len trims), so nothing downstream changes. The
scheduler methods wrapped here are the same on 0.20, 0.32 and 0.33 (0.33:
``Scheduler.update_from_output`` / ``update_draft_token_ids``,
``scheduler.py:2259, 2862``; ``AsyncScheduler._update_after_schedule`` sets the
k placeholders, ``async_scheduler.py:24-49``), and so is the V2 runner's
handling of fewer drafts than k: it sizes each request's logits from
``len(scheduled_spec_decode_tokens[req])`` (0.33 ``model_runner.py:1345-1350,
1427-1443``) and verifies the first that many of the drafts kept on the GPU.

With async scheduling the step after the next is already scheduled when a
step's output arrives, so a decision uses the proposal one step older than
the drafts it verifies; a request whose text starts or stops repeating
pays one step of k or misses one step of speculation.

Walking every request costs the engine core's host about 0.6 us a request
a step, so a step in which every request proposed k and accepted every
draft (the steady state on text that repeats) is decided from totals and
walks only the requests whose next verification is shorter than k
(``AdaptiveSpeculation.unsettled``); the decisions are the rule's.

The decision is written where the scheduler reads it next:
``request.spec_token_ids`` (placeholders of the decided length, or the
real drafts trimmed to it). ``fixed`` leaves vLLM's behaviour untouched.

A batch in which no request found a draft still pays for the proposer
after every step: its kernel launches, the count and the report cost the
runner's host about 0.25 ms a step (1B model, 64 requests, H100), about a
tenth of a step of a small model. With async scheduling the policy
therefore plans, as each step is scheduled, whether the runner proposes
after it (:meth:`AdaptiveSpeculation.plan`, carried to the worker as
:data:`PROPOSE_ATTR` on the ``SchedulerOutput``): every step while the
latest report found a draft for some request ("warm"), and one step in
:data:`PROBE_INTERVAL` while none did. After a step that proposes nothing
the next step verifies nothing (its placeholders are empty), so stale
drafts are never verified; a batch whose text starts repeating pays at most
:data:`PROBE_INTERVAL` + 3 steps before it verifies drafts again.
"""

from __future__ import annotations

import functools
import logging
import time
from typing import Any

from vllm_sampling_plugin import config as cfg
from vllm_sampling_plugin.integration.speculator.proposal_report import PROPOSE_ATTR, PROPOSED_ATTR

logger = logging.getLogger("vllm.vllm_sampling_plugin")

# Per-request state, kept on vLLM's Request objects (class defaults until
# the first output of a request arrives): how many draft tokens the next
# schedule gives it, and the acceptance cap.
VERIFY_ATTR = "vllm_sampling_plugin_verify_len"
CAP_ATTR = "vllm_sampling_plugin_verify_cap"

STATS_INTERVAL_S = 10.0

# While the latest report found no draft for any request, the runner
# proposes after one step in this many.
PROBE_INTERVAL = 8


class AdaptiveSpeculation:
    """The policy of one scheduler: decisions, and the tokens it counted."""

    def __init__(self, k: int):
        self.k = k
        # Read-only placeholder lists, one per length, shared by every request
        # as AsyncScheduler shares its k-long list.
        self.placeholders = tuple([-1] * n for n in range(k + 1))
        self.proposed = 0
        self.verified = 0
        self.accepted = 0
        self.last_log = time.monotonic()
        # Requests whose next verification is shorter than k (a cap below k,
        # or fewer tokens proposed): the only ones a step in which every
        # request proposed k and accepted every draft has to update.
        self.unsettled: set[str] = set()
        # Whether the latest report found a draft for some request, how many
        # steps were scheduled since the runner last proposed, and whether it
        # proposes after the latest step scheduled (whose drafts the next
        # schedule verifies).
        self.warm = True
        self.steps_since_proposal = 0
        self.latest_step_proposes = True
        self.steps = 0
        self.proposing_steps = 0

    def plan(self, scheduler_output: Any) -> bool:
        """Whether the runner proposes after the step just scheduled; marks
        ``scheduler_output`` with :data:`PROPOSE_ATTR` (async scheduling)."""
        proposes = self.warm or self.steps_since_proposal >= PROBE_INTERVAL - 1
        self.steps_since_proposal = 0 if proposes else self.steps_since_proposal + 1
        self.latest_step_proposes = proposes
        self.steps += 1
        self.proposing_steps += proposes
        setattr(scheduler_output, PROPOSE_ATTR, proposes)
        return proposes

    def observe(self, requests: dict[str, Any], scheduler_output: Any,
                output: Any) -> None:
        """Update every request of ``output`` and its next verification length."""
        scheduled_drafts = scheduler_output.scheduled_spec_decode_tokens
        num_proposed = getattr(output, PROPOSED_ATTR, None)
        if num_proposed is None:
            if getattr(scheduler_output, PROPOSE_ATTR, True):
                return  # a runner that does not report
            # The runner proposed nothing after this step (plan).
            if not scheduled_drafts and not self.latest_step_proposes:
                # Nothing verified, and the next schedule verifies nothing:
                # the latest step's placeholders are already empty.
                return
            num_proposed = [0] * len(output.req_ids)
            found = False
        else:
            found = self.warm = any(num_proposed)
        unsettled = self.unsettled
        if len(unsettled) > 2 * len(requests) + 64:
            # Finished requests leave now and then, not on every step.
            self.unsettled = unsettled = {r for r in unsettled if r in requests}
        req_ids = output.req_ids
        sampled = output.sampled_token_ids
        if not scheduled_drafts and not found:
            # Nothing verified (no cap moves) and nothing proposed: every
            # request verifies none next. On text that does not repeat this
            # is every step, so it skips the per-request cap logic.
            self.settle_unproposed(requests, req_ids)
        else:
            verified = self._verified_if_all_accepted(scheduled_drafts, sampled, num_proposed)
            if verified is None:
                self._decide(requests, scheduled_drafts, sampled, num_proposed,
                             enumerate(req_ids))
            else:
                # k proposed for every request and every draft accepted: a
                # settled request stays settled (cap k, k drafts next), so
                # only the unsettled ones are walked. On text that repeats
                # this is every step.
                self.proposed += sum(num_proposed)
                self.verified += verified
                self.accepted += verified
                if unsettled:
                    pending = [(i, r) for i, r in enumerate(req_ids) if r in unsettled]
                    self._decide(requests, scheduled_drafts, sampled, num_proposed, pending,
                                 count=False)
        self.log_stats()

    def _verified_if_all_accepted(self, scheduled_drafts: dict[str, list[int]],
                                  sampled: list[list[int]] | None,
                                  num_proposed: list[int]) -> int | None:
        """The step's verified drafts if every request proposed k and every
        verified draft was accepted, else None; totals only, no walk.

        A request accepts at most its drafts and samples them plus one, so
        sum(sampled) - requests == sum(drafts) holds only when each one
        accepted all of its drafts (a request without output or without
        drafts can only lower the left side)."""
        if not sampled or num_proposed.count(self.k) != len(num_proposed):
            return None
        verified = sum(map(len, scheduled_drafts.values()))
        accepted = sum(map(len, sampled)) - len(sampled)
        return verified if accepted == verified else None

    def _decide(self, requests: dict[str, Any], scheduled_drafts: dict[str, list[int]],
                sampled: list[list[int]] | None, num_proposed: list[int], entries,
                count: bool = True) -> None:
        """The per-request rule for ``entries`` (batch index, request id)."""
        k = self.k
        placeholders = self.placeholders
        unsettled = self.unsettled
        proposed = verified = accepted = 0
        for i, req_id in entries:
            request = requests.get(req_id)
            if request is None:
                continue
            cap = getattr(request, CAP_ATTR)
            drafts = scheduled_drafts.get(req_id)
            if drafts and sampled and sampled[i]:
                num_accepted = len(sampled[i]) - 1
                verified += len(drafts)
                accepted += num_accepted
                # Doubling regains k within two steps (k = 3) once a request
                # starts repeating; a rejection keeps the run seen plus one.
                cap = min(k, 2 * cap) if num_accepted >= len(drafts) else num_accepted + 1
                setattr(request, CAP_ATTR, cap)
            num_found = num_proposed[i]
            proposed += num_found
            length = min(num_found, cap)
            setattr(request, VERIFY_ATTR, length)
            if length < k:
                unsettled.add(req_id)
            else:
                unsettled.discard(req_id)
            # Async scheduling has already given it placeholders for the step
            # after the one in flight; shorten them to the decision.
            if request.spec_token_ids:
                request.spec_token_ids = placeholders[length]
        if count:
            self.proposed += proposed
            self.verified += verified
            self.accepted += accepted

    def settle_unproposed(self, requests: dict[str, Any], req_ids: list[str]) -> None:
        """``observe`` for a step with no drafts verified and none proposed."""
        empty = self.placeholders[0]
        for req_id in req_ids:
            request = requests.get(req_id)
            if request is None:
                continue
            setattr(request, VERIFY_ATTR, 0)
            if request.spec_token_ids:
                request.spec_token_ids = empty
        self.unsettled.update(req_ids)

    def trim(self, requests: dict[str, Any], req_ids: list[str]) -> None:
        """Shorten drafts that synchronous scheduling handed over to the decision."""
        for req_id in req_ids:
            request = requests.get(req_id)
            if request is None:
                continue
            length = getattr(request, VERIFY_ATTR)
            if len(request.spec_token_ids) > length:
                request.spec_token_ids = request.spec_token_ids[:length]

    def log_stats(self) -> None:
        now = time.monotonic()
        if now - self.last_log < STATS_INTERVAL_S or not self.proposed + self.verified:
            return
        # Under synchronous scheduling every step proposes (no plan).
        proposing = (
            f"; the proposer ran after {self.proposing_steps} of {self.steps} steps"
            if self.steps else ""
        )
        logger.info(
            "vllm-sampling-plugin n-gram speculation (adaptive): %d draft tokens "
            "proposed, %d verified, %d accepted (%.1f%% of verified)%s in the "
            "last %.0f s.",
            self.proposed, self.verified, self.accepted,
            100.0 * self.accepted / max(self.verified, 1), proposing,
            now - self.last_log,
        )
        self.proposed = self.verified = self.accepted = 0
        self.steps = self.proposing_steps = 0
        self.last_log = now


def runs_ngram(vllm_config: Any) -> bool:
    """Whether ``vllm_config`` speculates with n-gram proposals (the plugin's
    proposer on 0.20, upstream's NgramGPUSpeculator on 0.32 and 0.33)."""
    spec = vllm_config.speculative_config
    return spec is not None and spec.method in cfg.NGRAM_METHODS


def is_adaptive(vllm_config: Any) -> bool:
    """Whether the adaptive policy runs: n-gram speculation under
    ``speculation_policy="adaptive"`` (the scheduler's decisions, the
    proposal reports and the one-token decode graphs all follow this)."""
    settings = cfg.settings_from_model_config(vllm_config.model_config)
    return runs_ngram(vllm_config) and settings.speculation_policy == cfg.ADAPTIVE


def adaptive_speculation_for(vllm_config: Any) -> AdaptiveSpeculation | None:
    """The policy for a scheduler built from ``vllm_config``, or None (vLLM's
    behaviour): only for n-gram speculation under ``adaptive``."""
    if not runs_ngram(vllm_config):
        return None
    k = vllm_config.speculative_config.num_speculative_tokens
    if not is_adaptive(vllm_config):
        logger.info(
            "vllm-sampling-plugin speculation policy: fixed (every request "
            "verifies %d n-gram draft tokens every step).", k,
        )
        return None
    logger.info(
        "vllm-sampling-plugin speculation policy: adaptive (a request verifies "
        "the n-gram tokens proposed for it, at most %d, capped by its recent "
        "acceptance; --speculation-policy fixed verifies %d always).", k, k,
    )
    return AdaptiveSpeculation(k)


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
    # Until a request's first output: verify everything proposed.
    setattr(request_cls, VERIFY_ATTR, 1 << 30)
    setattr(request_cls, CAP_ATTR, 1 << 30)


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
        # 0.33 sizes the placeholders from the output (and its runner tells
        # the proposer that length); 0.20 keeps one list of k on the scheduler.
        if hasattr(scheduler_output, "num_spec_tokens_to_schedule"):
            scheduler_output.num_spec_tokens_to_schedule = 0
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
