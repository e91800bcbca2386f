"""Allowed ids, logit bias and min-tokens masking (``ops/logit_bias``).

The reference below applies the documented rule with plain torch indexing,
one row at a time, from the requests' unsorted lists and dicts; the op gets
the same requests in its buffer layout. Results must be equal bit for bit.
"""

import random

import pytest
import torch

from tests.ops.interpreter_warnings import IGNORE_MASKED_ARITHMETIC
from vllm_sampling_plugin.ops import apply_logit_bias_

pytestmark = IGNORE_MASKED_ARITHMETIC

NEG_INF = float("-inf")
# vLLM 0.20's per-request capacities (v1/worker/gpu/sample/logit_bias.py).
ALLOWED_CAPACITY, BIAS_CAPACITY, STOP_CAPACITY = 1024, 1024, 128


def reference(logits, rows, pos, requests):
    """The rule, row by row: allowed mask, then bias, then stop mask."""
    out = logits.clone()
    for i, r in enumerate(rows):
        req = requests[r]
        row = out[i]
        if req.get("allowed"):
            keep = torch.zeros(row.shape[0], dtype=torch.bool)
            keep[req["allowed"]] = True
            row[~keep] = NEG_INF
        for token, value in req.get("bias", {}).items():
            row[token] = row[token] + torch.tensor(value, dtype=torch.float32)
        outputs_before = pos[i] + 1 - req["prompt_len"]
        if req.get("stop") and outputs_before < req.get("min_tokens", 0):
            row[req["stop"]] = NEG_INF
    return out


def buffers(requests, device, stale=0):
    """The op's per-request buffers, as the runner integration fills them:
    lists sorted, unused capacity holding ``stale`` garbage."""
    n = len(requests)

    def table(capacity, dtype=torch.int32):
        return torch.full((n, capacity), stale, dtype=dtype)

    num_allowed, num_bias, num_stop, min_lens = (torch.zeros(n, dtype=torch.int32) for _ in range(4))
    allowed, bias_ids, stop = table(ALLOWED_CAPACITY), table(BIAS_CAPACITY), table(STOP_CAPACITY)
    bias = table(BIAS_CAPACITY, torch.float32)
    for r, req in enumerate(requests):
        ids = sorted(req.get("allowed", []))
        num_allowed[r] = len(ids)
        allowed[r, : len(ids)] = torch.tensor(ids, dtype=torch.int32)
        items = sorted(req.get("bias", {}).items())
        num_bias[r] = len(items)
        bias_ids[r, : len(items)] = torch.tensor([t for t, _ in items], dtype=torch.int32)
        bias[r, : len(items)] = torch.tensor([v for _, v in items], dtype=torch.float32)
        stops = sorted(req.get("stop", [])) if req.get("min_tokens", 0) > 0 else []
        num_stop[r] = len(stops)
        stop[r, : len(stops)] = torch.tensor(stops, dtype=torch.int32)
        min_lens[r] = req["prompt_len"] + req.get("min_tokens", 0)
    tensors = (num_allowed, allowed, num_bias, bias_ids, bias, min_lens, num_stop, stop)
    return [t.to(device) for t in tensors]


def run_op(logits, rows, pos, requests, device, stale=0):
    out = logits.to(device, copy=True)
    apply_logit_bias_(
        out,
        torch.tensor(rows, dtype=torch.int32, device=device),
        torch.tensor(pos, dtype=torch.int64, device=device),
        *buffers(requests, device, stale),
    )
    return out.cpu()


def assert_bitwise_equal(actual, expected):
    torch.testing.assert_close(actual, expected, rtol=0, atol=0, equal_nan=True)
    # assert_close treats 0.0 == -0.0; the sign bit must match too.
    assert torch.equal(torch.signbit(actual), torch.signbit(expected))


def random_requests(rng, vocab, n):
    requests = []
    for r in range(n):
        req = {"prompt_len": rng.randrange(1, 50)}
        kind = r % 5
        if kind in (0, 3):
            # Duplicates and unsorted order, as SamplingParams allows.
            req["allowed"] = [rng.randrange(vocab) for _ in range(rng.choice([1, 2, 3, 8, 37]))]
        if kind in (1, 3, 4):
            tokens = rng.sample(range(vocab), rng.choice([1, 5, 64]))
            if req.get("allowed"):
                # Bias on allowed tokens and on masked ones.
                tokens[: len(req["allowed"])] = sorted(set(req["allowed"]))[: len(tokens)]
            req["bias"] = {t: rng.choice([-100.0, -1.5, 0.25, 3.0, 7.75]) for t in tokens}
        if kind in (2, 3, 4):
            req["stop"] = rng.sample(range(vocab), rng.choice([1, 2, 4]))
            req["min_tokens"] = rng.randrange(0, 4)
            if kind == 3 and req.get("allowed"):
                req["stop"].append(req["allowed"][0])  # a stop token that is also allowed
        requests.append(req)
    requests.append({"prompt_len": 7})  # uses nothing
    return requests


@pytest.mark.parametrize("vocab", [100, 2500])  # one vocabulary block; several, the last ragged
@pytest.mark.parametrize("seed", [0, 1])
def test_matches_the_rule_on_random_requests(device, vocab, seed):
    rng = random.Random(seed)
    requests = random_requests(rng, vocab, 15)
    # Several logit rows per request (speculative verification), in any order.
    rows = [r for r in range(len(requests)) for _ in range(rng.randrange(1, 4))]
    rng.shuffle(rows)
    # Positions on both sides of every min-tokens boundary.
    pos = [requests[r]["prompt_len"] - 1 + rng.randrange(0, 6) for r in rows]
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(len(rows), vocab, generator=gen) * 4
    logits[logits.abs() < 0.05] = -0.0
    logits[:, 3] = NEG_INF
    expected = reference(logits, rows, pos, requests)
    assert_bitwise_equal(run_op(logits, rows, pos, requests, device, stale=3), expected)
    # The rule did something on most rows: the comparison is not vacuous.
    assert (expected != logits).any(dim=1).sum() >= len(rows) // 2


def test_only_allowed_tokens_stay_finite(device):
    vocab = 3000
    allowed = [40, 41, 42, 43, 44, 45, 46, 47]
    logits = torch.randn(4, vocab, generator=torch.Generator().manual_seed(5))
    out = run_op(logits, [0, 0, 1, 1], [9, 10, 9, 10], [
        {"prompt_len": 10, "allowed": allowed},
        {"prompt_len": 10, "allowed": list(range(vocab - 1, -1, -3))},  # spans every block
    ], device)
    assert out[:2].isfinite().nonzero()[:, 1].unique().tolist() == allowed
    assert torch.equal(out[:2, allowed], logits[:2, allowed])
    kept = out[2:].isfinite()
    assert kept.sum(dim=1).tolist() == [1000, 1000]
    assert kept[:, vocab - 1].all() and not kept[:, vocab - 2].any()


@pytest.mark.parametrize("count", [1, 2, 3, 511, 512, 513, ALLOWED_CAPACITY - 1, ALLOWED_CAPACITY])
def test_allowed_lists_of_every_length_up_to_capacity(device, count):
    vocab = 2 * ALLOWED_CAPACITY + 5
    rng = random.Random(count)
    allowed = rng.sample(range(vocab), count)
    logits = torch.randn(1, vocab, generator=torch.Generator().manual_seed(count))
    out = run_op(logits, [0], [0], [{"prompt_len": 1, "allowed": allowed}], device, stale=-7)
    assert_bitwise_equal(out, reference(logits, [0], [0], [{"prompt_len": 1, "allowed": allowed}]))


def test_stop_tokens_are_masked_for_exactly_min_tokens_outputs(device):
    prompt_len, min_tokens, stop = 5, 3, [1, 9]
    req = {"prompt_len": prompt_len, "stop": stop, "min_tokens": min_tokens}
    # Logits at position p draw output number p + 1 - prompt_len.
    positions = list(range(prompt_len - 1, prompt_len + 4))
    logits = torch.zeros(len(positions), 16)
    out = run_op(logits, [0] * len(positions), positions, [req], device)
    masked = [bool(row[stop].isneginf().all()) for row in out]
    assert masked == [True, True, True, False, False]
    assert out[:, [t for t in range(16) if t not in stop]].eq(0).all()


def test_bias_adds_to_allowed_tokens_and_leaves_masked_ones_at_minus_inf(device):
    req = {"prompt_len": 1, "allowed": [2, 5], "bias": {2: 1.5, 3: 100.0, 6: -2.0}}
    logits = torch.tensor([[0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]])
    out = run_op(logits, [0], [0], [req], device)
    assert out.tolist() == [[NEG_INF, NEG_INF, 3.5, NEG_INF, NEG_INF, 5.0, NEG_INF, NEG_INF]]


def test_rows_of_requests_using_nothing_are_untouched(device):
    logits = torch.tensor([[float("nan"), -0.0, NEG_INF, 1.0], [2.0, float("nan"), 3.0, -0.0]])
    requests = [{"prompt_len": 3, "stop": [0], "min_tokens": 1}, {"prompt_len": 2, "allowed": [1]}]
    # Row 0: its stop tokens no longer apply at this position; row 1's request is unused here.
    out = run_op(logits, [0, 0], [3, 8], requests, device)
    assert_bitwise_equal(out, logits)


def test_empty_batch_and_bad_inputs(device):
    requests = [{"prompt_len": 1, "allowed": [0]}]
    empty = torch.zeros(0, 8, device=device)
    args = buffers(requests, device)
    no_rows = torch.zeros(0, dtype=torch.int32, device=device)
    assert apply_logit_bias_(empty, no_rows, no_rows.long(), *args).shape == (0, 8)
    logits = torch.zeros(1, 8, device=device)
    with pytest.raises(ValueError, match="float32"):
        apply_logit_bias_(logits.half(), no_rows.new_zeros(1), no_rows.new_zeros(1).long(), *args)
    with pytest.raises(ValueError, match="idx_mapping must be"):
        apply_logit_bias_(logits, no_rows, no_rows.long(), *args)
    bad_allowed = list(args)
    bad_allowed[1] = args[1].long()
    with pytest.raises(ValueError, match="allowed_ids"):
        apply_logit_bias_(logits, no_rows.new_zeros(1), no_rows.new_zeros(1).long(), *bad_allowed)
