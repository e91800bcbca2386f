"""Top-k / top-p masking semantics (``ops/masking.py``)."""

import math

import pytest
import torch

from vllm_sampling_plugin.ops.masking import mask_top_k_top_p_

NEG_INF = float("-inf")


def kept_by_definition(row: list[float], top_k: int, top_p: float) -> list[bool]:
    """The documented rule, token by token, in float64 (NaN ranked as -inf)."""
    values = [NEG_INF if math.isnan(v) else v for v in row]
    vocab_size = len(values)
    kept = [True] * vocab_size
    if 0 < top_k < vocab_size:
        kth_largest = sorted(values, reverse=True)[top_k - 1]
        kept = [v >= kth_largest for v in values]
    if top_p < 1.0:
        top = max(v for v, k in zip(values, kept) if k)
        weights = [math.exp(v - top) if k else 0.0 for v, k in zip(values, kept)]
        total = sum(weights)
        mass_above = [
            sum(w for w, u in zip(weights, values) if u > v) / total for v in values
        ]
        kept = [k and (m < top_p or v == top) for k, m, v in zip(kept, mass_above, values)]
    return kept


def test_top_k_keeps_every_tie_at_the_threshold():
    logits = torch.tensor([[3.0, 1.0, 3.0, 2.0, 2.0, 0.0]])
    out = mask_top_k_top_p_(logits.clone(), torch.tensor([3]), None)
    assert out.tolist() == [[3.0, NEG_INF, 3.0, 2.0, 2.0, NEG_INF]]
    out = mask_top_k_top_p_(logits.clone(), torch.tensor([1]), None)
    assert out.tolist() == [[3.0, NEG_INF, 3.0, NEG_INF, NEG_INF, NEG_INF]]


@pytest.mark.parametrize("off", [0, -1, 6, 100])
def test_top_k_outside_1_to_vocab_minus_1_is_off(off):
    logits = torch.tensor([[3.0, 1.0, 3.0, 2.0, 2.0, 0.0]])
    out = mask_top_k_top_p_(logits.clone(), torch.tensor([off]), None)
    assert torch.equal(out, logits)


def test_top_p_keeps_smallest_prefix_reaching_p_and_its_ties():
    logits = torch.tensor([[3.0, 1.0, 3.0, 0.0, 2.0]])
    # probs: 0.392 (x2), 0.144, 0.053, 0.019.
    out = mask_top_k_top_p_(logits.clone(), None, torch.tensor([0.9]))
    assert out.tolist() == [[3.0, NEG_INF, 3.0, NEG_INF, 2.0]]
    # The second 3.0 is kept although the first alone has mass 0.39 > 0.3.
    out = mask_top_k_top_p_(logits.clone(), None, torch.tensor([0.3]))
    assert out.tolist() == [[3.0, NEG_INF, 3.0, NEG_INF, NEG_INF]]
    # p = 1 is off: even the least likely token stays.
    out = mask_top_k_top_p_(logits.clone(), None, torch.tensor([1.0]))
    assert torch.equal(out, logits)


def test_top_p_uses_the_renormalised_top_k_distribution():
    logits = torch.tensor([[3.0, 2.0, 1.0, 0.0]])
    # Full softmax: mass above 2.0 is 0.64 < 0.7, so top-p alone keeps it;
    # renormalised over the top 2 it is 0.73 >= 0.7, so it goes.
    assert mask_top_k_top_p_(logits.clone(), None, torch.tensor([0.7]))[0, 1] == 2.0
    out = mask_top_k_top_p_(logits.clone(), torch.tensor([2]), torch.tensor([0.7]))
    assert out.tolist() == [[3.0, NEG_INF, NEG_INF, NEG_INF]]


def test_nan_and_infinities():
    nan, inf = float("nan"), float("inf")
    logits = torch.tensor(
        [
            [nan, 1.0, 2.0, nan],
            [nan, nan, nan, nan],
            [1.0, inf, 0.0, inf],
            [NEG_INF] * 4,
        ]
    )
    out = mask_top_k_top_p_(logits.clone(), torch.tensor([2, 2, 3, 1]), torch.tensor([0.5] * 4))
    assert not out.isnan().any()
    assert out[0].tolist() == [NEG_INF, NEG_INF, 2.0, NEG_INF]
    assert out[1].tolist() == [NEG_INF] * 4
    assert out[2].tolist() == [NEG_INF, inf, NEG_INF, inf]
    assert out[3].tolist() == [NEG_INF] * 4
    # Without any mask NaN still becomes -inf.
    assert mask_top_k_top_p_(logits[:1].clone(), None, None)[0].tolist() == [NEG_INF, 1.0, 2.0, NEG_INF]


def test_masks_in_place_and_returns_its_input():
    logits = torch.tensor([[1.0, 2.0, 3.0]])
    assert mask_top_k_top_p_(logits, torch.tensor([1]), None) is logits
    assert logits.tolist() == [[NEG_INF, NEG_INF, 3.0]]


def test_matches_definition_on_random_rows_with_ties():
    """Every (row, token) agrees with the float64 rule, except tokens whose
    preceding mass is within 1e-5 of p (float32 cumulative sums may differ)."""
    gen = torch.Generator().manual_seed(0)
    batch_size, vocab_size = 300, 24
    logits = torch.randint(-6, 6, (batch_size, vocab_size), generator=gen).float() * 0.5
    logits[logits == 2.5] = float("nan")
    top_k = torch.randint(-2, vocab_size + 3, (batch_size,), generator=gen)
    top_p = torch.rand(batch_size, generator=gen) * 1.1 + 0.01
    out = mask_top_k_top_p_(logits.clone(), top_k, top_p)

    checked = 0
    for i in range(batch_size):
        row = logits[i].tolist()
        expected = kept_by_definition(row, int(top_k[i]), float(top_p[i]))
        near_boundary = [
            abs(m - float(top_p[i])) < 1e-5
            for m in _mass_above(row, int(top_k[i]))
        ] if float(top_p[i]) < 1 else [False] * vocab_size
        for j in range(vocab_size):
            if near_boundary[j]:
                continue
            checked += 1
            kept = out[i, j].item() != NEG_INF
            assert kept == (expected[j] and not math.isnan(row[j]) and row[j] != NEG_INF), (i, j)
            if kept:
                assert out[i, j].item() == row[j]
    assert checked > 0.95 * batch_size * vocab_size


def _mass_above(row: list[float], top_k: int) -> list[float]:
    values = [NEG_INF if math.isnan(v) else v for v in row]
    kept = kept_by_definition(row, top_k, 1.0)
    top = max(values)
    weights = [math.exp(v - top) if k else 0.0 for v, k in zip(values, kept)]
    total = sum(weights)
    return [sum(w for w, u in zip(weights, values) if u > v) / total for v in values]
