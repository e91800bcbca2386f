"""Verification of point-mass drafts by matching the target's own draws."""

import math

import pytest
import torch
from scipy import stats

from vllm_sampling_plugin.ops.gumbel import gumbel_sample
from vllm_sampling_plugin.ops.rejection import accept_matching_drafts


def _reference(target, drafts, cu, k):
    rows, counts = [], []
    for r in range(len(cu) - 1):
        start, n = cu[r], cu[r + 1] - cu[r]
        accepted = 0
        while accepted < n - 1 and target[start + accepted] == drafts[start + accepted + 1]:
            accepted += 1
        row = target[start:start + accepted + 1]
        rows.append(row + [-1] * (k + 1 - len(row)))
        counts.append(accepted + 1)
    return rows, counts


@pytest.mark.parametrize("k", [1, 3, 4])
def test_rows_match_the_longest_repeated_prefix(device, k):
    gen = torch.Generator().manual_seed(k)
    num_reqs = 40
    # Ragged: 1 .. k + 1 logits per request (some without drafts).
    sizes = torch.randint(1, k + 2, (num_reqs,), generator=gen)
    cu = [0] + torch.cumsum(sizes, 0).tolist()
    target = torch.randint(0, 4, (cu[-1],), generator=gen)
    # Drafts agree with the target's next token most of the time; some are
    # out of the vocabulary (never a target token).
    drafts = torch.roll(target, 1).clone()
    noise = torch.rand(cu[-1], generator=gen)
    drafts[noise < 0.25] = torch.randint(0, 4, (int((noise < 0.25).sum()),), generator=gen)
    drafts[noise > 0.95] = 10**6
    sampled, num_sampled = accept_matching_drafts(
        target.to(device), drafts.to(torch.int32).to(device),
        torch.tensor(cu, dtype=torch.int32, device=device), k)
    rows, counts = _reference(target.tolist(), drafts.tolist(), cu, k)
    assert sampled.tolist() == rows
    assert num_sampled.tolist() == counts
    assert sampled.dtype == torch.int64 and num_sampled.dtype == torch.int32
    # Every case occurs: full acceptance, a rejection at the first draft, no drafts.
    assert {1, k + 1} <= set(counts)


def test_acceptance_is_p_of_the_draft_and_rejections_follow_the_residual(device):
    """Composed with the Gumbel-max draw, matching is exact rejection sampling
    of a point-mass draft: P(accept d) = p(d); a rejected logit emits a token
    from p without d, renormalised."""
    vocab, draft, trials = 8, 2, 1200
    logits_row = torch.tensor([1.0, 0.2, 0.9, -0.5, 0.0, 1.3, -1.0, 0.4])
    p = torch.softmax(logits_row.double(), 0)
    # One request per trial: the draft's logit, then the bonus logit.
    logits = logits_row.repeat(2 * trials, 1).to(device)
    slots = torch.arange(trials, dtype=torch.int32).repeat_interleave(2).to(device)
    pos = torch.tensor([40, 41] * trials, dtype=torch.int64, device=device)
    seeds = torch.arange(7, 7 + trials, dtype=torch.int64, device=device)
    temperature = torch.ones(trials, device=device)
    target = gumbel_sample(logits, slots, temperature, seeds, pos, apply_temperature=False)
    drafts = torch.full((2 * trials,), draft, dtype=torch.int32, device=device)
    cu = torch.arange(0, 2 * trials + 1, 2, dtype=torch.int32, device=device)
    sampled, num_sampled = accept_matching_drafts(target, drafts, cu, 1)
    accepted = num_sampled.cpu() == 2
    n_acc = int(accepted.sum())
    sigma = math.sqrt(trials * p[draft] * (1 - p[draft]))
    assert abs(n_acc - trials * p[draft]) < 4 * sigma
    assert (sampled.cpu()[accepted, 0] == draft).all()
    emitted = sampled.cpu()[~accepted, 0]
    assert not (emitted == draft).any()
    residual = p.clone()
    residual[draft] = 0
    residual /= residual.sum()
    others = [t for t in range(vocab) if t != draft]
    observed = torch.bincount(emitted, minlength=vocab)[others].double()
    expected = residual[others] * len(emitted)
    assert stats.chisquare(observed.numpy(), expected.numpy()).pvalue > 1e-3


def test_arguments_are_checked(device):
    cu = torch.tensor([0, 1], dtype=torch.int32, device=device)
    one = torch.zeros(1, dtype=torch.int64, device=device)
    with pytest.raises(ValueError, match="num_speculative_steps"):
        accept_matching_drafts(one, one, cu, 0)
    with pytest.raises(ValueError, match="one entry per logit"):
        accept_matching_drafts(one, torch.zeros(2, dtype=torch.int64, device=device), cu, 1)
    with pytest.raises(ValueError, match="int32"):
        accept_matching_drafts(one, one, cu.long(), 1)
