"""benchmarks/workloads/policy_replay.py: the adaptive policy replayed on
vLLM's async schedule. Under fixed k a lone request must take exactly the
steps of the ceiling's replay after its prefill (which emits one token and
verifies nothing); on text that never repeats the policy must
verify nothing once its first output is in, where fixed k verifies k every
step; on text that copies its prompt it must emit nearly what fixed k does."""

import json
import random

import pytest

from benchmarks.workloads import ceiling, policy_replay
from benchmarks.workloads.__main__ import main
from vllm_sampling_plugin.policy import PROBE_INTERVAL, VERIFY_ALL_BAR, slot_bar

K = 3


def distinct(n, start=0):
    return list(range(start, start + n))


def test_fixed_k_alone_takes_the_ceilings_steps():
    rng = random.Random(0)
    for _ in range(20):
        vocab = rng.choice([3, 8, 40])
        prompt = [rng.randrange(vocab) for _ in range(rng.randint(0, 60))]
        trace = [rng.randrange(vocab) for _ in range(rng.randint(1, 80))]
        counts = policy_replay.replay_batch([(prompt, trace)], K, policy_replay.FIXED)
        after_prefill = ceiling.replay(prompt + trace[:1], trace[1:], K, "latest")
        assert counts["steps"] == counts["request_steps"] == 1 + after_prefill["steps"]
        assert counts["accepted"] == after_prefill["accepted"]
        assert counts["tokens"] == len(trace)
        assert counts["slots"] == K * after_prefill["steps"]


@pytest.mark.parametrize("batch", [1, 16])
def test_text_that_never_repeats_verifies_nothing_after_the_first_output(batch):
    requests = [(distinct(50, 1000 * i), distinct(120, 1000 * i + 50)) for i in range(batch)]
    adaptive = policy_replay.replay_batch(requests, K, policy_replay.ADAPTIVE)
    fixed = policy_replay.replay_batch(requests, K, policy_replay.FIXED)
    # Every step but the prefill verifies k under fixed k; under the policy
    # only step 1, scheduled before any output is observed, verifies any,
    # and below VERIFY_ALL_BAR the steps decided in a fresh policy's first
    # PROBE_INTERVAL outputs (it counts as warm through them).
    assert fixed["slots"] == K * (fixed["request_steps"] - batch)
    small = slot_bar(batch) < VERIFY_ALL_BAR
    assert adaptive["slots"] <= K * batch * (PROBE_INTERVAL if small else 1)
    assert adaptive["tokens"] == fixed["tokens"] == adaptive["request_steps"] == 120 * batch


@pytest.mark.parametrize("batch", [1, 16])
def test_text_that_copies_its_prompt_emits_nearly_what_fixed_k_does(batch):
    requests = [(distinct(200, 1000 * i), distinct(200, 1000 * i)) for i in range(batch)]
    adaptive = policy_replay.replay_batch(requests, K, policy_replay.ADAPTIVE)
    fixed = policy_replay.replay_batch(requests, K, policy_replay.FIXED)
    # After the prefill and one step without a match every draft is right.
    assert fixed["steps"] <= 2 + -(-198 // (K + 1))
    assert adaptive["steps"] <= fixed["steps"] + 2


def test_one_request_that_copies_between_gaps_of_new_text_finds_each_copy_early():
    """At one sequence a slot costs nearly nothing, and a summary copies
    sentences between stretches of new text: the runner keeps proposing
    through the gaps (WARM_REPORTS), so each copy is found as it starts and
    the policy takes nearly fixed k's steps; probing one step in eight there
    took 5.5% more steps. Slots being nearly free, a warm batch this small
    verifies k for its request through the gaps too (VERIFY_ALL_BAR): the
    per-request rule, which verified a seventh of fixed k's slots, took 2.9%
    more steps."""
    prompt = distinct(600, 0)
    trace = []
    for i in range(12):
        trace += prompt[40 * i:40 * i + 16] + distinct(30, 10000 + 100 * i)
    fixed = policy_replay.replay_batch([(prompt, trace)], K, policy_replay.FIXED)
    adaptive = policy_replay.replay_batch([(prompt, trace)], K, policy_replay.ADAPTIVE)
    assert adaptive["steps"] <= fixed["steps"] + 2
    assert adaptive["slots"] <= fixed["slots"]


def test_the_bounds_take_fixed_ks_steps_and_verify_fewer_slots():
    rng = random.Random(7)
    requests = [([rng.randrange(4) for _ in range(40)], [rng.randrange(4) for _ in range(90)])
                for _ in range(8)]
    requests += [(distinct(30, 1000 * i), distinct(60, 1000 * i + 30)) for i in range(1, 4)]
    fixed, found, oracle = (policy_replay.replay_batch(requests, K, mode) for mode in (
        policy_replay.FIXED, policy_replay.FOUND, policy_replay.ORACLE))
    for bound in (found, oracle):
        assert (bound["steps"], bound["tokens"], bound["accepted"]) == (
            fixed["steps"], fixed["tokens"], fixed["accepted"])
    # Oracle verifies exactly the accepted drafts, found every draft proposed
    # (fewer than fixed k: the requests that never repeat propose none).
    assert 0 < oracle["slots"] == oracle["accepted"] < found["slots"] < fixed["slots"]


def test_the_command_writes_every_workloads_replay(tmp_path, capsys):
    rows = [{"request_id": str(i), "workload": "code-edit",
             "prompt_token_ids": distinct(30, 100 * i),
             "trace_token_ids": distinct(30, 100 * i)[5:25]} for i in range(4)]
    (tmp_path / "code-edit.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    main(["policy", str(tmp_path), "--batches", "1,2", "--requests", "4"])
    replays = json.loads((tmp_path / "policy-replay-k3.json").read_text())
    assert [c["batch"] for c in replays["code-edit"]] == [1, 2]
    assert all(c["requests"] == 4 for c in replays["code-edit"])
    assert "| code-edit | 2 |" in capsys.readouterr().out
