"""AdaptiveSpeculation.observe on its own (no engine, CPU).

The decisions (verification length, cap, the placeholders handed to the
next schedule) and the counters must equal those of the per-request rule
written out below, on every step, including the zero-draft steps that take
the fast path; and a zero-draft step must not touch the caps at all.
"""

import random
from types import SimpleNamespace

from vllm_sampling_plugin.integration.proposal_report import PROPOSED_ATTR
from vllm_sampling_plugin.integration.speculation_policy import (
    CAP_ATTR,
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


def test_decisions_equal_the_rule_on_every_step():
    rng = random.Random(0)
    names = [f"r{i}" for i in range(40)]
    ours = {r: FakeRequest([-1] * K) for r in names}
    ref = {r: FakeRequest([-1] * K) for r in names}
    policy = AdaptiveSpeculation(K)
    counted = [0, 0, 0]
    for step in range(300):
        # Runs of zero-draft steps (the fast path) between verifying steps.
        zero = step % 7 != 0
        scheduled, sampled, proposed = random_step(rng, names, zero)
        # A prefix of the batch, and a request the scheduler no longer has.
        m = rng.randint(1, len(names))
        req_ids = names[:m] + ["gone"]
        sampled, proposed = sampled[:m] + [[7]], proposed[:m] + [0]
        out = SimpleNamespace(req_ids=req_ids, sampled_token_ids=sampled,
                              **{PROPOSED_ATTR: proposed})
        policy.observe(ours, SimpleNamespace(scheduled_spec_decode_tokens=scheduled), out)
        reference_observe(ref, scheduled, req_ids, sampled, proposed, K)
        assert state(ours) == state(ref), step
        counted[0] += sum(proposed)
        counted[1] += sum(len(scheduled.get(r, ())) for r in req_ids if r in ref)
        counted[2] += sum(len(s) - 1 for r, s in zip(req_ids, sampled) if scheduled.get(r))
        # The scheduler gives every request fresh placeholders each step.
        for q in list(ours.values()) + list(ref.values()):
            q.spec_token_ids = [-1] * K
    assert [policy.proposed, policy.verified, policy.accepted] == counted


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
