"""The adaptive speculation policy's decisions, apart from vLLM: which
draft tokens a request verifies next, and whether the runner proposes
after a step. integration/speculator/ installs it in vLLM's scheduler and
runner; this module imports no vLLM and is tested on its own.

A verified draft slot costs the step about as much as one more request in
the batch, and pays only if the draft is accepted. A step of ``B`` requests
costs about ``RIDGE_TOKENS + B`` token-units on a GPU (its weights read once
per step, then compute per token), so one more slot pays off where it is
accepted with a probability above ``B / (B + RIDGE_TOKENS)``: nearly always
at a few sequences, a third of the time at 256. Each request keeps the rate
at which its drafts were accepted (``ACCEPT_RATE_ATTR``: moving sums of the
drafts accepted and the drafts tried, up to and including the first rejected
one, divided) and verifies ``min(proposed, j)`` drafts, ``j`` the largest
count (at least one, at most k) whose chance ``rate ** j`` clears that bar.
Dividing sums rather than averaging each step's share lets a step that
accepted a long run count for each of its drafts: averaged shares rated a
request that alternates a rejected first draft with a fully accepted run at
one half, and its long copies were cut short at larger k. A request without
a proposal verifies nothing, as without speculation; with async scheduling the
decision reads the proposal one step older than the drafts it verifies
(vLLM has scheduled the step before the proposal it verifies exists), so a
request whose rate clears the square root of the bar keeps its length for
``HOLD_REPORTS`` outputs without a proposal: matches come and go step by
step in real text, and a request that lost its proposal for a step would
otherwise skip the drafts of the next one. Where the bar is below
``VERIFY_ALL_BAR`` (under about ten sequences) and the batch is warm (see
below), every request walked with a proposal verifies k, and one without
``BLIND_DRAFTS`` or as many as its rate pays for, whichever is more: slots
are nearly free there, and neither the stale proposal nor the rate can tell
which drafts will be accepted, but a request without a proposal can only
gain the first drafts of a copy that starts under it, however large k is.
Walking every request costs host time each step, so a step in which every
request proposed k and accepted every verified draft is decided from totals
and walks only the requests whose next verification is shorter than k
(``AdaptiveSpeculation.unsettled``); a request verifying k that accepts
them all keeps its state.

With async scheduling the policy also plans, as each step is scheduled,
whether the runner proposes after it (:meth:`AdaptiveSpeculation.plan`,
carried to the worker as :data:`PROPOSE_ATTR`): every step while one of the
latest :data:`WARM_REPORTS` reports found a draft for some request, one
step in :data:`PROBE_INTERVAL` otherwise (the proposer's launches cost a
small model's host a tenth of a step: docs/benchmarks.md). Real text copies
in stretches with new text between them, so a small batch stays warm
through such gaps: a probe every few steps would find each copy late.

benchmarks/workloads/policy_replay.py replays this class under vLLM's async
schedule on the real-text workloads (docs/workloads.md).
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

logger = logging.getLogger("vllm.vllm_sampling_plugin")

# Set on each model runner output: how many draft tokens the proposer found
# per request (integration/speculator/proposal_report.py sends it).
PROPOSED_ATTR = "vllm_sampling_plugin_num_proposed"
# The other direction: set on each SchedulerOutput under async scheduling,
# whether the runner proposes drafts after that step (absent: it does).
PROPOSE_ATTR = "vllm_sampling_plugin_propose"

# Per-request state, kept on vLLM's Request objects (class defaults until
# the first output of a request arrives): how many draft tokens the next
# schedule gives it, the rate at which its verified drafts were accepted
# and the moving sum of drafts tried behind it (the rate times it is the
# moving sum of drafts accepted), the latest report that found drafts for
# it and how many it found.
VERIFY_ATTR = "vllm_sampling_plugin_verify_len"
ACCEPT_RATE_ATTR = "vllm_sampling_plugin_accept_rate"
TRIED_ATTR = "vllm_sampling_plugin_drafts_tried"
FOUND_AT_ATTR = "vllm_sampling_plugin_found_at"
FOUND_ATTR = "vllm_sampling_plugin_found"
# Those class defaults: until a request's first output it verifies everything
# proposed, as if one draft had been tried and accepted, no proposal found yet.
REQUEST_DEFAULTS = {
    VERIFY_ATTR: 1 << 30,
    ACCEPT_RATE_ATTR: 1.0,
    TRIED_ATTR: 1.0,
    FOUND_AT_ATTR: -(1 << 30),
    FOUND_ATTR: 0,
}

# A step's cost in token-units is about RIDGE_TOKENS plus its tokens: the
# batch at which a decoding step's GEMMs turn from reading weights to
# computing (a few hundred tokens on current GPUs; docs/workloads.md gives
# the engine cells it was fitted on).
RIDGE_TOKENS = 512
# Weight of the newest verification in a request's moving sums of drafts
# accepted and tried.
RATE_WEIGHT = 0.15
# Outputs without a proposal through which a request whose rate clears the
# square root of the bar keeps its length (async scheduling's one-step-old
# proposals).
HOLD_REPORTS = 4
# Below this bar (batches under about ten sequences) a warm batch verifies k
# drafts for every request walked, proposal or not: slots are nearly free
# there, so any draft with a 2% chance pays, and neither the one-step-old
# proposal nor the per-request rate can tell which drafts have it
# (docs/configuration.md gives the replay behind it).
VERIFY_ALL_BAR = 0.02
# Below VERIFY_ALL_BAR, the drafts a request without a proposal verifies
# at least (more where its rate pays for more): the bet that a copy starts
# under its one-step-old proposal, which only its first drafts can win
# (docs/configuration.md gives the replay behind it).
BLIND_DRAFTS = 3

STATS_INTERVAL_S = 10.0

# While none of this many latest reports found a draft for any request, the
# runner proposes after one step in PROBE_INTERVAL.
WARM_REPORTS = 64
PROBE_INTERVAL = 8


def slot_bar(batch: int) -> float:
    """The acceptance probability above which one more verified slot pays
    off in a step of ``batch`` requests."""
    return batch / (batch + RIDGE_TOKENS)


def drafts_worth_verifying(rate: float, bar: float, k: int) -> int:
    """The largest ``j`` in 1..k with ``rate ** j >= bar`` (1 if none): a
    request with a proposal always verifies one draft, so its rate can rise."""
    if rate >= 1.0:
        return k
    if rate <= 0.0:
        return 1
    return max(1, min(k, int(math.log(bar) / math.log(rate))))


class AdaptiveSpeculation:
    """The policy of one scheduler: decisions, and the tokens it counted."""

    def __init__(self, k: int, kind: str = "n-gram"):
        self.k = k
        # What proposes the drafts ("n-gram", "suffix"), for the log lines.
        self.kind = kind
        # Read-only placeholder lists, one per length, shared by every request
        # as AsyncScheduler shares its k-long list.
        self.placeholders = tuple([-1] * n for n in range(k + 1))
        self.proposed = 0
        self.verified = 0
        self.accepted = 0
        self.last_log = time.monotonic()
        # Requests whose next verification is shorter than k (a slower rate,
        # fewer tokens proposed, none): the only ones a step in which every
        # request proposed k and accepted every draft has to update.
        self.unsettled: set[str] = set()
        # Outputs observed so far (FOUND_AT_ATTR counts in these) and the
        # latest whose report found a draft for some request; a fresh
        # scheduler proposes after its first PROBE_INTERVAL steps, then
        # probes until something is found.
        self.reports = 0
        self.found_report = PROBE_INTERVAL - WARM_REPORTS
        # How many steps were scheduled since the runner last proposed, and
        # whether it proposes after the latest step scheduled (whose drafts
        # the next schedule verifies).
        self.steps_since_proposal = 0
        self.latest_step_proposes = True
        self.steps = 0
        self.proposing_steps = 0

    @property
    def warm(self) -> bool:
        """Whether one of the latest WARM_REPORTS outputs observed found a draft."""
        return self.reports - self.found_report < WARM_REPORTS

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
            found = any(num_proposed)
        self.reports += 1
        if found:
            self.found_report = self.reports
        unsettled = self.unsettled
        if len(unsettled) > 2 * len(requests) + 64:
            # Finished requests leave now and then, not on every step.
            self.unsettled = unsettled = {r for r in unsettled if r in requests}
        req_ids = output.req_ids
        sampled = output.sampled_token_ids
        if not scheduled_drafts and not found and self.reports - self.found_report > HOLD_REPORTS:
            # Nothing verified (no rate moves), nothing proposed and no
            # request holding: every request verifies none next. On text
            # that does not repeat this is every step, so it skips the
            # per-request logic.
            self.settle_unproposed(requests, req_ids)
        else:
            verified = self._verified_if_all_accepted(scheduled_drafts, sampled, num_proposed)
            if verified is None:
                self._decide(requests, scheduled_drafts, sampled, num_proposed,
                             enumerate(req_ids), slot_bar(len(req_ids)))
            else:
                # k proposed for every request and every draft accepted: a
                # settled request stays settled (k drafts next), so only the
                # unsettled ones are walked. On text that repeats this is
                # every step.
                self.proposed += sum(num_proposed)
                self.verified += verified
                self.accepted += verified
                if unsettled:
                    pending = [(i, r) for i, r in enumerate(req_ids) if r in unsettled]
                    self._decide(requests, scheduled_drafts, sampled, num_proposed, pending,
                                 slot_bar(len(req_ids)), count=False)
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
                bar: float, count: bool = True) -> None:
        """The per-request rule for ``entries`` (batch index, request id) in
        a step whose slots pay off above acceptance probability ``bar``."""
        k = self.k
        report = self.reports
        hold_bar = math.sqrt(bar)
        placeholders = self.placeholders
        unsettled = self.unsettled
        # Slots nearly free and the batch warm: everyone walked verifies k,
        # or BLIND_DRAFTS at least without a proposal.
        verify_all = bar < VERIFY_ALL_BAR and self.warm
        blind = min(k, BLIND_DRAFTS)
        proposed = verified = accepted = 0
        for i, req_id in entries:
            request = requests.get(req_id)
            if request is None:
                continue
            rate = getattr(request, ACCEPT_RATE_ATTR)
            drafts = scheduled_drafts.get(req_id)
            if drafts and sampled and sampled[i]:
                num_accepted = len(sampled[i]) - 1
                verified += len(drafts)
                accepted += num_accepted
                # The drafts tried: the accepted run and the first rejected.
                tried = min(num_accepted + 1, len(drafts))
                # Moving sums of drafts accepted (the rate times the sum
                # tried) and tried, the rate their ratio; the sum tried
                # stays positive (a step tries one draft at least).
                tried_sum = getattr(request, TRIED_ATTR)
                accepted_sum = rate * tried_sum
                accepted_sum += RATE_WEIGHT * (num_accepted - accepted_sum)
                tried_sum += RATE_WEIGHT * (tried - tried_sum)
                rate = accepted_sum / tried_sum
                setattr(request, ACCEPT_RATE_ATTR, rate)
                setattr(request, TRIED_ATTR, tried_sum)
            num_found = num_proposed[i]
            proposed += num_found
            if num_found:
                setattr(request, FOUND_AT_ATTR, report)
                setattr(request, FOUND_ATTR, num_found)
            elif report - getattr(request, FOUND_AT_ATTR) <= HOLD_REPORTS and rate >= hold_bar:
                # Held: its next drafts are likely found again.
                num_found = getattr(request, FOUND_ATTR)
            if verify_all:
                length = k if num_found else max(blind, drafts_worth_verifying(rate, bar, k))
            else:
                length = min(num_found, drafts_worth_verifying(rate, bar, k)) if num_found else 0
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
        """``observe`` for a step with no drafts verified, none proposed and
        no request holding."""
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
            "vllm-sampling-plugin %s speculation (adaptive): %d draft tokens "
            "proposed, %d verified, %d accepted (%.1f%% of verified)%s in the "
            "last %.0f s.",
            self.kind, self.proposed, self.verified, self.accepted,
            100.0 * self.accepted / max(self.verified, 1), proposing,
            now - self.last_log,
        )
        self.proposed = self.verified = self.accepted = 0
        self.steps = self.proposing_steps = 0
        self.last_log = now
