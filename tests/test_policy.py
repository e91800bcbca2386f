"""The adaptive policy's decisions on their own (no vLLM, no engine, CPU).

The decisions (verification length, acceptance rate, the placeholders
handed to the next schedule) and the counters must equal those of the
per-request rule written out below, on every step, including the steps that
take a fast path; and a zero-draft step with no request holding must not
read a request's rate at all.
"""

import math
import random
from types import SimpleNamespace

import pytest

from vllm_sampling_plugin import policy as policy_module
from vllm_sampling_plugin.policy import (
    BLIND_DRAFTS,
    ACCEPT_RATE_ATTR,
    HOLD_REPORTS,
    PROBE_INTERVAL,
    PROPOSED_ATTR,
    RATE_WEIGHT,
    REQUEST_DEFAULTS,
    RIDGE_TOKENS,
    VERIFY_ALL_BAR,
    VERIFY_ATTR,
    WARM_REPORTS,
    AdaptiveSpeculation,
    drafts_worth_verifying,
    slot_bar,
)

K = 3


class FakeRequest:
    def __init__(self, spec_token_ids):
        self.spec_token_ids = spec_token_ids


# Class defaults, as patch_scheduler sets them on vLLM's Request.
for _name, _value in REQUEST_DEFAULTS.items():
    setattr(FakeRequest, _name, _value)


class Reference:
    """The policy's rule, one request at a time, written out plainly: the
    rate is a moving sum of the drafts accepted over a moving sum of the
    drafts tried (up to the first rejected one; one tried and accepted
    before the first verification), a request
    verifies min(found, the most drafts its rate pays for at this batch
    size), and one without a proposal keeps the latest found count for
    HOLD_REPORTS outputs while its rate is at least the square root of the
    bar. Below VERIFY_ALL_BAR, while one of the latest WARM_REPORTS outputs
    found a draft for some request, every request with a proposal (held or
    found) verifies k instead and one without the most of BLIND_DRAFTS (at
    most k) and what its rate pays for, except
    in a step that verified nothing and follows HOLD_REPORTS outputs that
    found nothing (no request is walked: every one verifies none). A request
    that verified k drafts and accepted them all in a step where every
    request proposed k and accepted everything keeps its state."""

    def __init__(self, k):
        self.k = k
        self.outputs = 0
        # The latest output that found a draft for some request (a fresh
        # policy counts as warm for its first PROBE_INTERVAL outputs).
        self.found_output = PROBE_INTERVAL - WARM_REPORTS
        self.found = {}  # request id -> (output index, count) of its latest proposal
        self.sums = {}  # request id -> moving sums of drafts accepted and tried

    def observe(self, requests, scheduled, req_ids, sampled, num_proposed):
        self.outputs += 1
        k = self.k
        bar = len(req_ids) / (len(req_ids) + RIDGE_TOKENS)
        if any(num_proposed):
            self.found_output = self.outputs
        quiet = not scheduled and self.outputs - self.found_output > HOLD_REPORTS
        verify_all = (bar < VERIFY_ALL_BAR and self.outputs - self.found_output < WARM_REPORTS
                      and not quiet)
        all_accepted = (num_proposed.count(k) == len(num_proposed) and all(
            len(s) - 1 == len(scheduled.get(r, ())) for r, s in zip(req_ids, sampled)))
        for i, req_id in enumerate(req_ids):
            request = requests.get(req_id)
            if request is None:
                continue
            if all_accepted and getattr(request, VERIFY_ATTR) >= k:
                continue
            accepted_sum, tried_sum = self.sums.get(req_id, (1.0, 1.0))
            drafts = scheduled.get(req_id)
            if drafts and sampled[i]:
                accepted = len(sampled[i]) - 1
                tried = min(accepted + 1, len(drafts))
                accepted_sum = (1 - RATE_WEIGHT) * accepted_sum + RATE_WEIGHT * accepted
                tried_sum = (1 - RATE_WEIGHT) * tried_sum + RATE_WEIGHT * tried
                self.sums[req_id] = (accepted_sum, tried_sum)
            rate = accepted_sum / tried_sum
            found = num_proposed[i]
            if found:
                self.found[req_id] = (self.outputs, found)
            else:
                at, count = self.found.get(req_id, (-(1 << 30), 0))
                if self.outputs - at <= HOLD_REPORTS and rate >= math.sqrt(bar):
                    found = count
            most = max(j for j in range(1, k + 1) if j == 1 or rate ** j >= bar)
            if verify_all:
                length = k if found else max(min(k, BLIND_DRAFTS), most)
            else:
                length = min(found, most)
            setattr(request, VERIFY_ATTR, length)
            setattr(request, ACCEPT_RATE_ATTR, rate)
            if request.spec_token_ids:
                request.spec_token_ids = [-1] * length


def state(requests):
    return {r: (getattr(q, VERIFY_ATTR), round(getattr(q, ACCEPT_RATE_ATTR), 9),
                list(q.spec_token_ids))
            for r, q in requests.items()}


def random_step(rng, names, zero, k=K):
    scheduled, sampled, proposed = {}, [], []
    for _ in names:
        if zero:
            sampled.append([7])
            proposed.append(0)
            continue
        n = rng.randint(0, k)
        sampled.append([7] * (1 + rng.randint(0, n)))
        proposed.append(rng.choice([0, rng.randint(0, k)]))
        if n:
            scheduled[_] = [-1] * n
    return scheduled, sampled, proposed


def settled_state(requests, k=K):
    """``state`` with the lengths at or past k read as k: a request never
    verifies more than k, so those values decide the same."""
    return {r: (min(v, k), a, p) for r, (v, a, p) in state(requests).items()}


class Twin:
    """The policy and the rule side by side over the same requests."""

    def __init__(self, names, k=K):
        self.k = k
        self.ours = {r: FakeRequest([-1] * k) for r in names}
        self.ref = {r: FakeRequest([-1] * k) for r in names}
        self.policy = AdaptiveSpeculation(k)
        self.reference = Reference(k)
        self.counted = [0, 0, 0]

    def step(self, scheduled, req_ids, sampled, proposed):
        out = SimpleNamespace(req_ids=req_ids, sampled_token_ids=sampled,
                              **{PROPOSED_ATTR: proposed})
        self.policy.observe(
            self.ours, SimpleNamespace(scheduled_spec_decode_tokens=scheduled), out)
        self.reference.observe(self.ref, scheduled, req_ids, sampled, proposed)
        assert settled_state(self.ours, self.k) == settled_state(self.ref, self.k)
        self.counted[0] += sum(proposed)
        self.counted[1] += sum(len(scheduled.get(r, ())) for r in req_ids if r in self.ref)
        self.counted[2] += sum(len(s) - 1 for r, s in zip(req_ids, sampled)
                               if scheduled.get(r))
        # The scheduler gives every request fresh placeholders each step.
        for q in list(self.ours.values()) + list(self.ref.values()):
            q.spec_token_ids = [-1] * self.k

    def counters(self):
        return [self.policy.proposed, self.policy.verified, self.policy.accepted]


def test_decisions_equal_the_rule_on_every_step():
    rng = random.Random(0)
    names = [f"r{i}" for i in range(40)]
    twin = Twin(names)
    for step in range(300):
        # Runs of zero-draft steps (the fast path) between verifying steps.
        scheduled, sampled, proposed = random_step(rng, names, zero=step % 7 != 0)
        # A prefix of the batch, and a request the scheduler no longer has.
        m = rng.randint(1, len(names))
        twin.step(scheduled, names[:m] + ["gone"], sampled[:m] + [[7]], proposed[:m] + [0])
    assert twin.counters() == twin.counted


@pytest.mark.parametrize("k", [3, 7, 16])
def test_decisions_equal_the_rule_in_a_small_batch(k):
    """Under VERIFY_ALL_BAR, where a request without a proposal verifies
    BLIND_DRAFTS or what its rate pays for, whichever is more."""
    rng = random.Random(k)
    names = [f"r{i}" for i in range(6)]
    assert slot_bar(len(names)) < VERIFY_ALL_BAR
    twin = Twin(names, k)
    lengths = set()
    for step in range(300):
        scheduled, sampled, proposed = random_step(rng, names, zero=step % 9 == 8, k=k)
        twin.step(scheduled, names, sampled, proposed)
        lengths.update(getattr(q, VERIFY_ATTR) for q in twin.ours.values())
    assert twin.counters() == twin.counted
    # Both branches ran: k for a proposal, fewer for none where k is larger.
    assert k in lengths and (k == BLIND_DRAFTS or any(0 < n < k for n in lengths))


class RateCounting(FakeRequest):
    reads = 0

    def __getattribute__(self, name):
        if name == ACCEPT_RATE_ATTR:
            type(self).reads += 1
        return super().__getattribute__(name)


def zero_draft_output(requests):
    return SimpleNamespace(req_ids=list(requests), sampled_token_ids=[[7]] * len(requests),
                           **{PROPOSED_ATTR: [0] * len(requests)})


def test_zero_draft_step_reads_no_request_once_no_request_holds():
    requests = {f"r{i}": RateCounting([-1] * K) for i in range(64)}
    policy = AdaptiveSpeculation(K)
    nothing = SimpleNamespace(scheduled_spec_decode_tokens={})
    # The first outputs of a policy walk: a proposal could be held.
    for _ in range(HOLD_REPORTS):
        policy.observe(requests, nothing, zero_draft_output(requests))
    RateCounting.reads = 0
    policy.observe(requests, nothing, zero_draft_output(requests))
    assert RateCounting.reads == 0
    assert all(q.spec_token_ids == [] and getattr(q, VERIFY_ATTR) == 0
               for q in requests.values())


def accepting_step(rng, names, verify_len, reject):
    """Every request proposed k; each verifies what it was given and, unless
    ``reject``, accepts all of it; with ``reject`` one request rejects."""
    scheduled = {r: [-1] * verify_len[r] for r in names if verify_len[r]}
    sampled = [[7] * (1 + verify_len[r]) for r in names]
    if reject and scheduled:
        victim = rng.choice(sorted(scheduled))
        sampled[names.index(victim)] = [7] * rng.randint(1, len(scheduled[victim]))
    return scheduled, sampled, [K] * len(names)


def test_accepting_steps_walk_only_the_unsettled_and_decide_as_the_rule():
    rng = random.Random(1)
    names = [f"r{i}" for i in range(48)]
    twin = Twin(names)
    for step in range(400):
        # Mostly accepting steps, a rejection now and then, and runs of
        # zero-draft steps that leave every request unsettled.
        phase = step % 100
        if 40 <= phase < 50:
            scheduled, sampled, proposed = random_step(rng, names, zero=True)
        else:
            verify_len = {r: min(getattr(q, VERIFY_ATTR), K) for r, q in twin.ref.items()}
            scheduled, sampled, proposed = accepting_step(rng, names, verify_len,
                                                          reject=phase % 13 == 0)
        twin.step(scheduled, list(names), sampled, proposed)
    assert twin.counters() == twin.counted
    # Every request has been settled again after the last rejection.
    assert not twin.policy.unsettled


def test_settled_accepting_step_reads_no_request():
    requests = {f"r{i}": RateCounting([-1] * K) for i in range(64)}
    scheduled = SimpleNamespace(scheduled_spec_decode_tokens={r: [-1] * K for r in requests})
    out = SimpleNamespace(req_ids=list(requests), sampled_token_ids=[[7] * (K + 1)] * 64,
                          **{PROPOSED_ATTR: [K] * 64})
    policy = AdaptiveSpeculation(K)
    RateCounting.reads = 0
    policy.observe(requests, scheduled, out)
    assert RateCounting.reads == 0
    assert (policy.proposed, policy.verified, policy.accepted) == (64 * K, 64 * K, 64 * K)
    # Rejections send that request (only) through the rule: its rate falls
    # by RATE_WEIGHT of the way to 0 each time; one rejection still pays
    # for k drafts at 64 requests, a run of them brings it down to one.
    bar = slot_bar(64)
    rate = 1.0
    lengths = []
    for rejections in range(1, 16):
        out = SimpleNamespace(req_ids=list(requests), sampled_token_ids=[[7] * (K + 1)] * 63 + [[7]],
                              **{PROPOSED_ATTR: [K] * 64})
        RateCounting.reads = 0
        policy.observe(requests, scheduled, out)
        assert RateCounting.reads == 64  # the full walk: the step had a rejection
        rate *= 1 - RATE_WEIGHT
        assert getattr(requests["r63"], ACCEPT_RATE_ATTR) == pytest.approx(rate)
        lengths.append(getattr(requests["r63"], VERIFY_ATTR))
        assert lengths[-1] == drafts_worth_verifying(rate, bar, K)
        assert policy.unsettled == ({"r63"} if lengths[-1] < K else set())
    assert lengths[0] == K and lengths[-1] == 1 and lengths == sorted(lengths, reverse=True)


def test_drafts_worth_verifying_is_the_largest_count_whose_chance_clears_the_bar():
    for rate in [0.0, 0.05, 0.2, 0.333, 0.5, 0.7, 0.9, 0.99, 1.0]:
        for batch in [1, 16, 64, 256, 1024]:
            bar = slot_bar(batch)
            expected = max(j for j in range(1, K + 1) if j == 1 or rate ** j >= bar)
            assert drafts_worth_verifying(rate, bar, K) == expected, (rate, batch)
    # Half its drafts accepted: k at 16 requests, one at 256.
    assert drafts_worth_verifying(0.5, slot_bar(16), K) == K
    assert drafts_worth_verifying(0.5, slot_bar(256), K) == 1


@pytest.mark.parametrize("k, batch", [(16, 16), (7, 64)])
def test_a_long_accepted_run_counts_for_each_of_its_drafts(k, batch):
    """A request that alternates a rejected first draft with k accepted
    drafts is accepted on k of every k + 1 drafts it tries: its rate nears
    k / (k + 1) and it verifies k, where averaging each step's share (one
    half) would cut its copies to a few drafts."""
    names = [f"r{i}" for i in range(batch)]
    requests = {r: FakeRequest([-1] * k) for r in names}
    policy = AdaptiveSpeculation(k)
    for step in range(60):
        rejected = step % 2 == 0
        sampled = [[7] if rejected else [7] * (k + 1)] + [[7]] * (batch - 1)
        out = SimpleNamespace(req_ids=names, sampled_token_ids=sampled,
                              **{PROPOSED_ATTR: [k] + [0] * (batch - 1)})
        policy.observe(requests, SimpleNamespace(scheduled_spec_decode_tokens={"r0": [-1] * k}),
                       out)
    rate = getattr(requests["r0"], ACCEPT_RATE_ATTR)
    assert abs(rate - k / (k + 1)) < 0.05
    assert getattr(requests["r0"], VERIFY_ATTR) == k
    # Half a draft accepted a step, as averaged shares put it, pays for fewer.
    assert drafts_worth_verifying(0.5, slot_bar(batch), k) <= k // 2


def verify_after(policy, requests, found_then_nothing):
    """A request proposes k once, then nothing: its verification lengths."""
    lengths = []
    for found in found_then_nothing:
        out = SimpleNamespace(req_ids=list(requests), sampled_token_ids=[[7]] * len(requests),
                              **{PROPOSED_ATTR: [found] + [0] * (len(requests) - 1)})
        policy.observe(requests, SimpleNamespace(scheduled_spec_decode_tokens={}), out)
        lengths.append(getattr(requests["r0"], VERIFY_ATTR))
    return lengths


@pytest.mark.parametrize("batch, rate, held", [(16, 1.0, True), (16, 0.3, True),
                                              (256, 1.0, True), (256, 0.3, False)])
def test_a_proposal_is_held_while_the_rate_pays_for_it(batch, rate, held):
    """Async scheduling verifies the drafts of one step with the proposal
    count of the step before: a request that lost its proposal for a step
    keeps its length for HOLD_REPORTS outputs where its rate clears the
    square root of the bar, and verifies nothing after that."""
    requests = {f"r{i}": FakeRequest([-1] * K) for i in range(batch)}
    setattr(requests["r0"], ACCEPT_RATE_ATTR, rate)
    lengths = verify_after(AdaptiveSpeculation(K), requests, [K] + [0] * (HOLD_REPORTS + 2))
    first = drafts_worth_verifying(rate, slot_bar(batch), K)
    kept = [first] * HOLD_REPORTS if held else [0] * HOLD_REPORTS
    assert lengths == [first] + kept + [0, 0]
    assert held == (rate >= math.sqrt(slot_bar(batch)))


def test_a_batch_proposes_every_step_until_warm_reports_outputs_found_nothing():
    """A fresh policy proposes after its first PROBE_INTERVAL steps; after a
    find it proposes after every step until WARM_REPORTS outputs in a row
    found nothing, then one step in PROBE_INTERVAL."""
    policy = AdaptiveSpeculation(K)
    requests = {"a": FakeRequest([])}

    def step(found):
        scheduler_output = SimpleNamespace(scheduled_spec_decode_tokens={})
        proposes = policy.plan(scheduler_output)
        output = SimpleNamespace(req_ids=["a"], sampled_token_ids=[[1]])
        if proposes:
            setattr(output, PROPOSED_ATTR, [K if found else 0])
        policy.observe(requests, scheduler_output, output)
        return proposes

    fresh = [step(False) for _ in range(3 * policy_module.PROBE_INTERVAL)]
    assert fresh[:policy_module.PROBE_INTERVAL] == [True] * policy_module.PROBE_INTERVAL
    assert not all(fresh[policy_module.PROBE_INTERVAL:])
    while not step(True):
        pass  # the steps up to the next probe, which finds drafts
    after = [step(False) for _ in range(policy_module.WARM_REPORTS + 2 * policy_module.PROBE_INTERVAL)]
    assert all(after[:policy_module.WARM_REPORTS - 1]), after
    # Through a gap of new text as long as a summary's between two copied
    # sentences (tests/benchmarks/test_policy_replay.py replays one).
    assert all(after[:32]), after
    assert after[policy_module.WARM_REPORTS:].count(True) <= 2, after


def test_plan_probes_a_cold_batch_and_the_stats_line_says_how_often(monkeypatch):
    from vllm_sampling_plugin.policy import PROPOSE_ATTR

    policy = AdaptiveSpeculation(K)
    plans = []
    for step in range(3 * policy_module.PROBE_INTERVAL):
        if step == 2:
            # The latest WARM_REPORTS outputs found nothing for anyone.
            policy.reports = policy.found_report + policy_module.WARM_REPORTS
        plans.append(policy.plan(SimpleNamespace()))
    interval = policy_module.PROBE_INTERVAL
    assert plans[:2] == [True, True]
    # Cold from step 2: the first probe comes PROBE_INTERVAL steps after the
    # last proposing step (1), then one every PROBE_INTERVAL.
    assert [s for s, p in enumerate(plans) if p][2:] == [1 + interval, 1 + 2 * interval]
    so = SimpleNamespace()
    policy.found_report = policy.reports
    assert policy.plan(so) and getattr(so, PROPOSE_ATTR) is True

    policy.proposed, policy.verified, policy.accepted = 12, 9, 6
    monkeypatch.setattr(policy_module.time, "monotonic", lambda: policy.last_log + 11)
    # vLLM's logger does not propagate to pytest's handler: read the call.
    lines = []
    monkeypatch.setattr(policy_module.logger, "info", lambda fmt, *args: lines.append(fmt % args))
    policy.log_stats()
    steps = 3 * interval + 1
    assert lines and (f"12 draft tokens proposed, 9 verified, 6 accepted (66.7% of verified); the "
                      f"proposer ran after 5 of {steps} steps in the last 11 s.") in lines[0], lines
    assert policy.steps == policy.proposing_steps == 0


def found_then_lost(batch, steps):
    """"r0" finds k every output and accepts every draft it verifies; "r1"
    finds k in the first output only; the others never find any. Before each
    output the scheduler's placeholders are k long for "r0" and "r1" and one
    long for the others (a shorter earlier decision). Per output: the
    verification length and placeholders of "r1" and of "r2"."""
    names = [f"r{i}" for i in range(batch)]
    requests = {r: FakeRequest([]) for r in names}
    policy = AdaptiveSpeculation(K)
    seen = []
    for step in range(steps):
        for i, q in enumerate(requests.values()):
            q.spec_token_ids = [-1] * (K if i < 2 else 1)
        proposed = [K, K if step == 0 else 0] + [0] * (batch - 2)
        scheduled = {"r0": [-1] * K} if step else {}
        sampled = [[7] * (1 + len(scheduled.get(r, ()))) for r in names]
        out = SimpleNamespace(req_ids=names, sampled_token_ids=sampled, **{PROPOSED_ATTR: proposed})
        policy.observe(requests, SimpleNamespace(scheduled_spec_decode_tokens=scheduled), out)
        seen.append({r: (getattr(requests[r], VERIFY_ATTR), list(requests[r].spec_token_ids))
                     for r in ("r1", "r2")})
    assert policy.warm
    return seen


@pytest.mark.parametrize("batch", [1 + 2, 9])
def test_a_small_warm_batch_verifies_k_for_every_request(batch):
    """Below VERIFY_ALL_BAR (a few sequences) with drafts found lately, a
    request verifies k whether its latest report found a proposal or not,
    and whatever its rate: its placeholders lengthened or shortened to k."""
    assert slot_bar(batch) < VERIFY_ALL_BAR
    steps = HOLD_REPORTS + 4
    seen = found_then_lost(batch, steps)
    assert seen == [{"r1": (K, [-1] * K), "r2": (K, [-1] * K)}] * steps
    # A request whose rate pays for one draft only verifies k too.
    requests = {f"r{i}": FakeRequest([-1] * K) for i in range(batch)}
    setattr(requests["r1"], ACCEPT_RATE_ATTR, 0.05)
    assert drafts_worth_verifying(0.05, slot_bar(batch), K) == 1
    assert verify_after(AdaptiveSpeculation(K), requests, [K, 0, 0]) == [K, K, K]


@pytest.mark.parametrize("rate, expected", [(0.05, BLIND_DRAFTS), (1.0, 16), (0.6, None)])
def test_a_small_warm_batch_verifies_few_blind_drafts_at_large_k(rate, expected):
    """At k=16 a request without a proposal verifies BLIND_DRAFTS, or as
    many as its rate pays for where that is more; one with a proposal k."""
    k, batch = 16, 4
    bar = slot_bar(batch)
    requests = {f"r{i}": FakeRequest([-1] * k) for i in range(batch)}
    setattr(requests["r1"], ACCEPT_RATE_ATTR, rate)
    out = SimpleNamespace(req_ids=list(requests), sampled_token_ids=[[7]] * batch,
                          **{PROPOSED_ATTR: [k, 0, 0, 0]})
    AdaptiveSpeculation(k).observe(requests, SimpleNamespace(scheduled_spec_decode_tokens={}), out)
    if expected is None:
        expected = drafts_worth_verifying(rate, bar, k)
        assert BLIND_DRAFTS < expected < k
    assert getattr(requests["r0"], VERIFY_ATTR) == k
    assert getattr(requests["r1"], VERIFY_ATTR) == expected
    assert requests["r1"].spec_token_ids == [-1] * expected


@pytest.mark.parametrize("batch", [10 + 1, 64])
def test_a_large_warm_batch_verifies_what_was_proposed(batch):
    """At and above VERIFY_ALL_BAR the per-request rule stands: a request
    without a proposal keeps its length through the hold, then verifies
    none; one never proposed verifies none."""
    assert slot_bar(batch) >= VERIFY_ALL_BAR
    seen = found_then_lost(batch, HOLD_REPORTS + 3)
    assert [s["r1"][0] for s in seen] == [K] * (1 + HOLD_REPORTS) + [0, 0]
    assert [s["r1"][1] for s in seen] == [[-1] * K] * (1 + HOLD_REPORTS) + [[], []]
    assert seen[-1]["r2"] == (0, []) and all(s["r2"] == (0, []) for s in seen)


def test_a_cold_small_batch_verifies_k_only_while_warm():
    """At one request in three finding drafts (bar below VERIFY_ALL_BAR),
    the others verify k while one of the latest WARM_REPORTS outputs found a
    draft, and nothing once none has (as before the rule), until a find."""
    names = ["r0", "r1", "r2"]
    requests = {r: FakeRequest([-1] * K) for r in names}
    policy = AdaptiveSpeculation(K)

    def step(found):
        # "r0" verifies one draft each step, so every output is walked.
        for q in requests.values():
            q.spec_token_ids = [-1] * K
        out = SimpleNamespace(req_ids=names, sampled_token_ids=[[7, 7], [7], [7]],
                              **{PROPOSED_ATTR: [K if found else 0, 0, 0]})
        policy.observe(requests, SimpleNamespace(scheduled_spec_decode_tokens={"r0": [-1]}), out)
        return getattr(requests["r1"], VERIFY_ATTR), list(requests["r2"].spec_token_ids)

    assert step(True) == (K, [-1] * K)
    quiet = [step(False) for _ in range(WARM_REPORTS + 2)]
    # The find was output 1; outputs 2..WARM_REPORTS are warm.
    assert quiet[:WARM_REPORTS - 1] == [(K, [-1] * K)] * (WARM_REPORTS - 1)
    assert not policy.warm
    assert quiet[WARM_REPORTS - 1:] == [(0, [])] * 3
    assert step(True) == (K, [-1] * K)
