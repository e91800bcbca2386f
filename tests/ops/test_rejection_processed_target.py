"""Speculation with min-p and logit bias: emitted tokens follow the processed target.

The plugin's RejectionSampler hands the rejection kernel the Sampler's
processed logits (logit bias, then temperature, then min-p, as vLLM 0.20's
Sampler applies them) and does not divide by the temperature again. This is
that call on vLLM's packed layout with n-gram (point-mass) drafts: the first
emitted token must follow ``softmax(processed logit 0)`` and, after an
accepted draft, the bonus token ``softmax(processed logit 1)``, whatever the
draft is (a token min-p removed, one the bias made likely).
"""

import pytest
import torch
from scipy import stats

from tests.ops.interpreter_warnings import IGNORE_MASKED_ARITHMETIC
from vllm_sampling_plugin.ops import rejection_sample_packed

pytestmark = IGNORE_MASKED_ARITHMETIC

P_MIN = 1e-3
VOCAB = 24
NUM_REQS = 300
TEMPERATURE = 0.9
MIN_P = 0.15
# Token 3 is pushed up by the bias, token 9 down below the min-p cut.
LOGIT_BIAS = {3: 1.5, 9: -4.0}


def _processed(raw: torch.Tensor) -> torch.Tensor:
    """vLLM 0.20's Sampler.apply_sampling_params for these fields, in order."""
    logits = raw.clone()
    for token, bias in LOGIT_BIAS.items():
        logits[..., token] += bias
    logits = logits / TEMPERATURE
    threshold = logits.max(dim=-1, keepdim=True).values + torch.log(torch.tensor(MIN_P))
    return logits.masked_fill(logits < threshold, float("-inf"))


def _assert_follows(tokens: torch.Tensor, probs: torch.Tensor) -> None:
    counts = torch.bincount(tokens.cpu(), minlength=VOCAB).double()
    assert counts[probs == 0].sum() == 0, "emitted a token the processing removed"
    kept = probs > 0
    expected = probs[kept] * tokens.numel()
    # Merge the rare tail so every bin expects at least 5.
    order = expected.argsort(descending=True)
    observed, expect = counts[kept][order].tolist(), expected[order].tolist()
    while len(expect) > 2 and expect[-1] < 5:
        expect[-2] += expect.pop()
        observed[-2] += observed.pop()
    pvalue = stats.chisquare(observed, expect).pvalue
    assert pvalue > P_MIN, f"p = {pvalue:.2e}: {observed} vs {expect}"


@pytest.mark.parametrize("use_fp64", [False, True], ids=["fp32", "fp64"])
@pytest.mark.parametrize("draft", [3, 9], ids=["biased_up", "removed_by_min_p"])
def test_emitted_tokens_follow_the_processed_target(device, draft, use_fp64):
    generator = torch.Generator().manual_seed(5)
    raw = torch.randn(2, VOCAB, generator=generator) * 0.8
    top = raw.max(dim=-1).values
    # Without the bias token 3 is not the top and token 9 is: the bias
    # decides both, and min-p (after it) removes token 9.
    raw[:, 3] = top - 0.5
    raw[:, 9] = top
    processed = _processed(raw)
    probs = processed.double().softmax(dim=-1)
    assert probs[0, 9] == 0 and probs[1, 9] == 0, "set-up: min-p must remove token 9"
    # Every request: logit 0 verifies the draft, logit 1 gives the bonus.
    target = processed.repeat(NUM_REQS, 1).to(device)
    draft_tokens = torch.tensor([0, draft] * NUM_REQS, dtype=torch.int64, device=device)
    cu_num_logits = torch.arange(NUM_REQS + 1, dtype=torch.int32, device=device) * 2
    pos = (torch.arange(2 * NUM_REQS, dtype=torch.int64) % 2 + 40).to(device)
    sampled, num_sampled = rejection_sample_packed(
        target,
        draft_tokens,
        cu_num_logits,
        idx_mapping=torch.arange(NUM_REQS, dtype=torch.int32, device=device),
        pos=pos,
        temperature=torch.full((NUM_REQS,), TEMPERATURE, device=device),
        seeds=torch.arange(NUM_REQS, dtype=torch.int64, device=device) * 104729 + 1,
        num_speculative_steps=1,
        use_fp64=use_fp64,
    )
    sampled, num_sampled = sampled.cpu(), num_sampled.cpu()
    _assert_follows(sampled[:, 0], probs[0])
    accepted = num_sampled == 2
    if draft == 9:
        assert not accepted.any()
    else:
        assert (sampled[accepted, 0] == draft).all()
        # A point-mass draft is accepted with its target probability.
        rate = float(probs[0, draft])
        sigma = (NUM_REQS * rate * (1 - rate)) ** 0.5
        assert abs(int(accepted.sum()) - NUM_REQS * rate) < 4 * sigma
        # The bonus after an accepted draft: the processed distribution of logit 1.
        _assert_follows(sampled[accepted, 1], probs[1])
