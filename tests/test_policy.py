"""The adaptive policy's decisions on their own (no vLLM, no engine, CPU).

The decisions (verification length, cap, the placeholders handed to the
next schedule) and the counters must equal those of the per-request rule
written out below, on every step, including the zero-draft steps that take
the fast path; and a zero-draft step must not touch the caps at all.
"""

import random
from types import SimpleNamespace

from vllm_sampling_plugin.policy import (
    CAP_ATTR,
    PROPOSED_ATTR,
    VERIFY_ATTR,
    AdaptiveSpeculation,
)

K = 3


class FakeRequest:
    # Class defaults, as patch_scheduler sets them on vLLM's Request.
    vllm_sampling_plugin_verify_len = 1 << 30
    vllm_sampling_plugin_verify_cap = 1 << 30

    def __init__(self, spec_token_ids):
        self.spec_token_ids = spec_token_ids


def reference_observe(requests, scheduled, req_ids, sampled, num_proposed, k):
    """The policy's rule, one request at a time."""
    for i, req_id in enumerate(req_ids):
        request = requests.get(req_id)
        if request is None:
            continue
        cap = getattr(request, CAP_ATTR)
        drafts = scheduled.get(req_id)
        if drafts and sampled[i]:
            num_accepted = len(sampled[i]) - 1
            cap = min(k, 2 * cap) if num_accepted >= len(drafts) else num_accepted + 1
            setattr(request, CAP_ATTR, cap)
        length = min(num_proposed[i], cap)
        setattr(request, VERIFY_ATTR, length)
        if request.spec_token_ids:
            request.spec_token_ids = [-1] * length


def state(requests):
    return {r: (getattr(q, VERIFY_ATTR), getattr(q, CAP_ATTR), list(q.spec_token_ids))
            for r, q in requests.items()}


def random_step(rng, names, zero):
    scheduled, sampled, proposed = {}, [], []
    for _ in names:
        if zero:
            sampled.append([7])
            proposed.append(0)
            continue
        n = rng.randint(0, K)
        sampled.append([7] * (1 + rng.randint(0, n)))
        proposed.append(rng.randint(0, K))
        if n:
            scheduled[_] = [-1] * n
    return scheduled, sampled, proposed


def settled_state(requests):
    """``state`` with the caps and lengths at or past k read as k: a request
    never verifies more than k, so those values decide the same."""
    return {r: (min(v, K), min(c, K), p) for r, (v, c, p) in state(requests).items()}


class Twin:
    """The policy and the rule side by side over the same requests."""

    def __init__(self, names):
        self.ours = {r: FakeRequest([-1] * K) for r in names}
        self.ref = {r: FakeRequest([-1] * K) for r in names}
        self.policy = AdaptiveSpeculation(K)
        self.counted = [0, 0, 0]

    def step(self, scheduled, req_ids, sampled, proposed):
        out = SimpleNamespace(req_ids=req_ids, sampled_token_ids=sampled,
                              **{PROPOSED_ATTR: proposed})
        self.policy.observe(
            self.ours, SimpleNamespace(scheduled_spec_decode_tokens=scheduled), out)
        reference_observe(self.ref, scheduled, req_ids, sampled, proposed, K)
        assert settled_state(self.ours) == settled_state(self.ref)
        self.counted[0] += sum(proposed)
        self.counted[1] += sum(len(scheduled.get(r, ())) for r in req_ids if r in self.ref)
        self.counted[2] += sum(len(s) - 1 for r, s in zip(req_ids, sampled)
                               if scheduled.get(r))
        # The scheduler gives every request fresh placeholders each step.
        for q in list(self.ours.values()) + list(self.ref.values()):
            q.spec_token_ids = [-1] * K

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


class CapCounting(FakeRequest):
    reads = 0

    def __getattribute__(self, name):
        if name == CAP_ATTR:
            type(self).reads += 1
        return super().__getattribute__(name)


def test_zero_draft_step_leaves_caps_alone():
    requests = {f"r{i}": CapCounting([-1] * K) for i in range(64)}
    out = SimpleNamespace(req_ids=list(requests), sampled_token_ids=[[7]] * 64,
                          **{PROPOSED_ATTR: [0] * 64})
    AdaptiveSpeculation(K).observe(
        requests, SimpleNamespace(scheduled_spec_decode_tokens={}), out)
    assert CapCounting.reads == 0
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
    requests = {f"r{i}": CapCounting([-1] * K) for i in range(64)}
    scheduled = {r: [-1] * K for r in requests}
    out = SimpleNamespace(req_ids=list(requests), sampled_token_ids=[[7] * (K + 1)] * 64,
                          **{PROPOSED_ATTR: [K] * 64})
    policy = AdaptiveSpeculation(K)
    CapCounting.reads = 0
    policy.observe(requests, SimpleNamespace(scheduled_spec_decode_tokens=scheduled), out)
    assert CapCounting.reads == 0
    assert (policy.proposed, policy.verified, policy.accepted) == (64 * K, 64 * K, 64 * K)
    # One rejection sends that request (only) through the rule.
    sampled = [[7] * (K + 1)] * 63 + [[7]]
    out = SimpleNamespace(req_ids=list(requests), sampled_token_ids=sampled,
                          **{PROPOSED_ATTR: [K] * 64})
    policy.observe(requests, SimpleNamespace(scheduled_spec_decode_tokens=scheduled), out)
    assert CapCounting.reads == 64  # the full walk: the step had a rejection
    assert policy.unsettled == {"r63"}
    assert getattr(requests["r63"], CAP_ATTR) == 1 and getattr(requests["r63"], VERIFY_ATTR) == 1


def test_plan_probes_a_cold_batch_and_the_stats_line_says_how_often(monkeypatch):
    import vllm_sampling_plugin.policy as policy_module
    from vllm_sampling_plugin.policy import PROPOSE_ATTR

    policy = AdaptiveSpeculation(K)
    plans = []
    for step in range(3 * policy_module.PROBE_INTERVAL):
        if step == 2:
            policy.warm = False  # a report found nothing for anyone
        plans.append(policy.plan(SimpleNamespace()))
    interval = policy_module.PROBE_INTERVAL
    assert plans[:2] == [True, True]
    # Cold from step 2: the first probe comes PROBE_INTERVAL steps after the
    # last proposing step (1), then one every PROBE_INTERVAL.
    assert [s for s, p in enumerate(plans) if p][2:] == [1 + interval, 1 + 2 * interval]
    so = SimpleNamespace()
    policy.warm = True
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
