"""FlashInfer's top-k/top-p path as the plugin calls it (GPU only).

Distribution: chi-square goodness of fit of many draws against the exact
top-k-then-top-p distribution. Robustness: NaN/Inf rows yield valid ids and
leave the other rows' draws unchanged (same generator state, same kernel).
"""

import numpy as np
import pytest
import torch
from scipy import stats

from vllm_sampling_plugin.ops.topk_topp.flashinfer import (
    flashinfer_top_k_top_p_sample,
    probe_flashinfer,
)

pytestmark = pytest.mark.gpu

# Reject at p < 1e-4: with these fixed seeds a correct sampler passes, and a
# sampler that ignores top-k or top-p is off by far more than that.
P_THRESHOLD = 1e-4


@pytest.fixture(autouse=True)
def _needs_flashinfer():
    support = probe_flashinfer()
    if not support.usable:
        pytest.skip(support.reason)


def exact_top_k_top_p(logits: torch.Tensor, k: int, p: float) -> np.ndarray:
    """Probabilities after top-k then top-p (no ties in these logits)."""
    probs = torch.softmax(logits.double(), dim=-1)
    order = torch.argsort(probs, descending=True)
    keep = torch.zeros_like(probs, dtype=torch.bool)
    keep[order[:k]] = True
    renorm = torch.where(keep, probs, 0) / probs[keep].sum()
    sorted_mass = renorm[order]
    mass_before = torch.cumsum(sorted_mass, 0) - sorted_mass
    keep_p = torch.zeros_like(keep)
    keep_p[order[(mass_before < p) & (sorted_mass > 0)]] = True
    out = torch.where(keep_p, renorm, 0)
    return (out / out.sum()).cpu().numpy()


@pytest.mark.parametrize("k, p", [(8, 1.0), (64, 0.7), (64, 0.9), (3, 0.5), (1, 1.0)])
def test_draws_follow_top_k_top_p(k, p):
    torch.manual_seed(0)
    vocab, draws = 64, 200_000
    row = torch.randn(vocab, device="cuda") * 2
    logits = row.expand(draws, vocab).contiguous()
    top_k = torch.full((draws,), k, dtype=torch.int32, device="cuda")
    top_p = torch.full((draws,), p, dtype=torch.float32, device="cuda")
    ids = flashinfer_top_k_top_p_sample(logits, top_k, top_p)
    expected = exact_top_k_top_p(row, k, p)
    counts = np.bincount(ids.cpu().numpy(), minlength=vocab)
    assert counts[expected == 0].sum() == 0, "sampled a token outside the kept set"
    kept = expected > 0
    if kept.sum() == 1:  # a one-token set leaves nothing to test but the token
        assert counts[kept][0] == draws
        return
    result = stats.chisquare(counts[kept], expected[kept] * draws)
    assert result.pvalue > P_THRESHOLD, result


CORRUPTIONS = {
    "one_all_nan_row": lambda x: x[1].fill_(float("nan")),
    "a_few_nans": lambda x: x[1, ::7].fill_(float("nan")),
    "nan_at_top_logit": lambda x: x[1].__setitem__(x[1].argmax(), float("nan")),
    "plus_inf": lambda x: x[1, 5].fill_(float("inf")),
    "minus_inf": lambda x: x[1, ::3].fill_(float("-inf")),
    "all_minus_inf_row": lambda x: x[1].fill_(float("-inf")),
}


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
def test_nan_and_inf_rows_give_valid_ids_and_leave_other_rows_alone(corruption):
    vocab, rows = 1000, 8
    torch.manual_seed(1)
    clean = torch.randn(rows, vocab, device="cuda")
    top_k = torch.full((rows,), 50, dtype=torch.int32, device="cuda")
    top_p = torch.full((rows,), 0.9, dtype=torch.float32, device="cuda")
    torch.manual_seed(123)
    reference = flashinfer_top_k_top_p_sample(clean.clone(), top_k, top_p)
    corrupted = clean.clone()
    CORRUPTIONS[corruption](corrupted)
    torch.manual_seed(123)
    ids = flashinfer_top_k_top_p_sample(corrupted, top_k, top_p)
    assert ids.dtype == torch.int64
    assert bool(((ids >= 0) & (ids < vocab)).all()), ids
    others = torch.arange(rows, device="cuda") != 1
    assert torch.equal(ids[others], reference[others])
