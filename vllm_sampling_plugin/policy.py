"""The adaptive speculation policy's decisions, apart from vLLM: which
draft tokens a request verifies next, and whether the runner proposes
after a step. integration/speculator/ installs it in vLLM's scheduler and
runner; this module imports no vLLM and is tested on its own.

A request verifies ``min(proposed, cap)`` draft tokens, where ``proposed``
is how many tokens the proposer found for it in the latest step whose
output has arrived and ``cap`` follows its acceptance: it doubles (up to k)
after a step that accepted every verified draft and falls to one more than
the accepted run after a step that rejected one. A request without a
proposal therefore runs one token, as without speculation; one whose
proposals are accepted keeps k. Walking every request costs host time each
step, so a step in which every request proposed k and accepted every draft
is decided from totals and walks only the requests whose next verification
is shorter than k (``AdaptiveSpeculation.unsettled``).

With async scheduling the policy also plans, as each step is scheduled,
whether the runner proposes after it (:meth:`AdaptiveSpeculation.plan`,
carried to the worker as :data:`PROPOSE_ATTR`): every step while the latest
report found a draft for some request, one step in :data:`PROBE_INTERVAL`
while none did (the proposer's launches cost a small model's host a tenth
of a step: docs/benchmarks.md).
"""

from __future__ import annotations

import logging
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
# schedule gives it, and the acceptance cap.
VERIFY_ATTR = "vllm_sampling_plugin_verify_len"
CAP_ATTR = "vllm_sampling_plugin_verify_cap"

STATS_INTERVAL_S = 10.0

# While the latest report found no draft for any request, the runner
# proposes after one step in this many.
PROBE_INTERVAL = 8


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
