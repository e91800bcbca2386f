"""Rows with only a few finite logits, as a grammar bitmask leaves them.

Structured outputs (JSON schema, regex) set every logit the grammar forbids
to ``-inf`` before sampling, so a row often has 1, 2 or a handful of finite
entries. Every sampling kernel must then pick one of those (never a masked
id, never an out-of-range id), pick *the* finite token when there is only
one, and draw the few finite tokens with the probabilities of the softmax
over them after min-p, top-k and top-p.

Kernels covered: the plain Gumbel path and the fused top-k/top-p path (both
through ``ops.sample``, which picks the kernel as the engine does) and the
rejection kernel (a point-mass draft, as n-gram drafts are). Min-p is
applied to the logits before the kernels, where vLLM's sampler applies it.

Each row of a launch is one draw: same logits, a different seed. Seeds are
fixed, so every test is deterministic; a correct kernel fails one chi-square
test with probability ``P_MIN``.
"""

import pytest
import torch
from scipy import stats

from tests.ops.covering import pairwise_cover
from tests.ops.interpreter_warnings import IGNORE_MASKED_ARITHMETIC
from tests.ops.topk_topp_reference import kept_set
from vllm_sampling_plugin.ops import rejection_sample, rejection_sample_packed, sample

pytestmark = IGNORE_MASKED_ARITHMETIC

P_MIN = 1e-3
VOCAB = 96
NUM_DRAWS = 240
# Spread over the vocabulary, two of them neighbours; the logits are chosen
# so every kept token's expected count stays well above 5 at NUM_DRAWS.
FINITE_IDS = {1: [37], 2: [5, 70], 5: [0, 21, 22, 58, 95]}
FINITE_LOGITS = {1: [0.3], 2: [0.4, -0.3], 5: [0.2, 0.9, -0.4, 0.5, 0.0]}
TEMPERATURE = 0.8

# name -> (top_k, top_p, min_p). top_k above and below the finite count,
# top-p cutting the least likely finite tokens, min-p cutting below 0.5 x max.
FILTERS = {
    "none": (0, 1.0, 0.0),
    "top_k_above_finite_count": (8, 1.0, 0.0),
    "top_k_2": (2, 1.0, 0.0),
    "top_p_0.6": (0, 0.6, 0.0),
    "min_p_0.5": (0, 1.0, 0.5),
    "all": (4, 0.9, 0.3),
}

# The finite counts, filters and precisions meet pairwise (tests/ops/covering.py):
# each case is an interpreted launch of NUM_DRAWS rows, seconds on CPU CI.


def _case_id(value) -> str:
    return ("fp64" if value else "fp32") if isinstance(value, bool) else str(value)


def _row(num_finite: int) -> torch.Tensor:
    row = torch.full((VOCAB,), float("-inf"))
    row[FINITE_IDS[num_finite]] = torch.tensor(FINITE_LOGITS[num_finite])
    return row


def _apply_min_p(logits: torch.Tensor, min_p: float) -> torch.Tensor:
    """vLLM 0.20's min-p on temperature-scaled logits: drop below max + log(min_p)."""
    if min_p == 0.0:
        return logits
    threshold = logits.max(dim=-1, keepdim=True).values + torch.log(torch.tensor(min_p))
    return logits.masked_fill(logits < threshold, float("-inf"))


def _target_probs(num_finite: int, top_k: int, top_p: float, min_p: float) -> torch.Tensor:
    """The distribution the sampler must draw: softmax after min-p, top-k, top-p."""
    scaled = _apply_min_p(_row(num_finite)[None] / TEMPERATURE, min_p)[0]
    keep = torch.from_numpy(kept_set(scaled.numpy(), top_k, top_p).keep)
    return scaled.double().masked_fill(~keep, float("-inf")).softmax(dim=-1)


def _assert_follows(tokens: torch.Tensor, probs: torch.Tensor) -> None:
    tokens = tokens.cpu()
    assert tokens.min() >= 0 and tokens.max() < VOCAB
    counts = torch.bincount(tokens, minlength=VOCAB).double()
    outside = (probs == 0) & (counts > 0)
    assert not outside.any(), f"drew ids of probability 0: {outside.nonzero().flatten().tolist()}"
    kept = probs > 0
    if int(kept.sum()) == 1:
        return
    expected = probs[kept] * tokens.numel()
    assert expected.min() >= 5, "test set-up: a bin is too small for chi-square"
    pvalue = stats.chisquare(counts[kept].numpy(), expected.numpy()).pvalue
    assert pvalue > P_MIN, f"p = {pvalue:.2e}: counts {counts[kept].tolist()} vs {expected.tolist()}"


def _scaled_by_min_p(num_finite: int, min_p: float, device) -> torch.Tensor:
    """Raw logits whose min-p survivors are those of the temperature-scaled row.

    The kernels divide by the temperature themselves; min-p's cut does not
    change under a positive scale, so it is found on the scaled row and
    applied to the raw one.
    """
    raw = _row(num_finite)
    cut = _apply_min_p(raw[None] / TEMPERATURE, min_p)[0].isinf()
    return raw.masked_fill(cut, float("-inf")).expand(NUM_DRAWS, VOCAB).contiguous().to(device)


def _draw_args(device):
    return (
        torch.full((NUM_DRAWS,), TEMPERATURE, device=device),
        torch.arange(NUM_DRAWS, dtype=torch.int64, device=device) * 7919 + 3,
        torch.full((NUM_DRAWS,), 11, dtype=torch.int64, device=device),
    )


@pytest.mark.slow  # minutes under the interpreter; the GPU runs it in seconds
@pytest.mark.parametrize(
    "num_finite, filter_name, use_fp64", pairwise_cover((2, 5), tuple(FILTERS), (False, True)), ids=_case_id
)
def test_fused_top_k_top_p_draws_the_filtered_softmax(device, num_finite, filter_name, use_fp64):
    top_k, top_p, min_p = FILTERS[filter_name]
    logits = _scaled_by_min_p(num_finite, min_p, device)
    temperature, seeds, positions = _draw_args(device)
    tokens = sample(
        logits, temperature, seeds, positions,
        top_k=torch.full((NUM_DRAWS,), top_k, dtype=torch.int64, device=device),
        top_p=torch.full((NUM_DRAWS,), top_p, device=device),
        use_fp64=use_fp64,
    )
    _assert_follows(tokens, _target_probs(num_finite, top_k, top_p, min_p))


@pytest.mark.parametrize("use_fp64", [False, True], ids=["fp32", "fp64"])
@pytest.mark.parametrize("min_p", [0.0, 0.5])
@pytest.mark.parametrize("num_finite", [2, 5])
def test_gumbel_draws_the_softmax_over_the_finite_tokens(device, num_finite, min_p, use_fp64):
    logits = _scaled_by_min_p(num_finite, min_p, device)
    temperature, seeds, positions = _draw_args(device)
    tokens = sample(logits, temperature, seeds, positions, use_fp64=use_fp64)
    _assert_follows(tokens, _target_probs(num_finite, 0, 1.0, min_p))


@pytest.mark.slow  # minutes under the interpreter; the GPU runs it in seconds
@pytest.mark.parametrize(
    "num_finite, draft, use_fp64", pairwise_cover((2, 5), ("likely", "unlikely", "masked"), (False, True)), ids=_case_id
)
def test_rejection_emits_the_softmax_over_the_finite_tokens(device, num_finite, draft, use_fp64):
    """The first emitted token (accepted draft or residual resample) follows
    the target; a draft the grammar masked is never accepted."""
    ids, values = FINITE_IDS[num_finite], FINITE_LOGITS[num_finite]
    draft_id = {
        "likely": ids[max(range(num_finite), key=values.__getitem__)],
        "unlikely": ids[min(range(num_finite), key=values.__getitem__)],
        "masked": next(i for i in range(VOCAB) if i not in ids),
    }[draft]
    row = _row(num_finite).to(device)
    target = row.expand(NUM_DRAWS, 2, VOCAB).contiguous()
    temperature, seeds, positions = _draw_args(device)
    drafts = torch.full((NUM_DRAWS, 1), draft_id, dtype=torch.int64, device=device)
    tokens, num_emitted = rejection_sample(
        target, drafts, None, temperature, seeds, positions, use_fp64=use_fp64
    )
    _assert_follows(tokens[:, 0], _target_probs(num_finite, 0, 1.0, 0.0))
    if draft == "masked":
        assert (num_emitted == 1).all()
    else:
        # An accepted draft is followed by a bonus token from the same row.
        accepted = num_emitted == 2
        assert (tokens[accepted, 0] == draft_id).all()
        assert torch.isin(tokens[accepted, 1].cpu(), torch.tensor(ids)).all()


@pytest.mark.parametrize("use_fp64", [False, True], ids=["fp32", "fp64"])
@pytest.mark.parametrize("temperature", [0.0, 1.3])
def test_one_finite_token_is_always_drawn(device, temperature, use_fp64):
    (only,) = FINITE_IDS[1]
    num_rows = 16
    logits = _row(1).expand(num_rows, VOCAB).contiguous().to(device)
    temperatures = torch.full((num_rows,), temperature, device=device)
    seeds = torch.arange(num_rows, dtype=torch.int64, device=device)
    positions = torch.arange(num_rows, dtype=torch.int64, device=device)
    plain = sample(logits, temperatures, seeds, positions, use_fp64=use_fp64)
    # Every filter at once, top-k below and above the one finite token.
    top_k = torch.tensor([1, 2, 50, 0] * 4, dtype=torch.int64, device=device)
    top_p = torch.tensor([0.1, 0.5, 0.99, 1.0] * 4, device=device)
    fused = sample(logits, temperatures, seeds, positions, top_k, top_p, use_fp64=use_fp64)
    masked_draft = torch.full((num_rows, 2), (only + 1) % VOCAB, dtype=torch.int64, device=device)
    matching_draft = torch.full((num_rows, 2), only, dtype=torch.int64, device=device)
    target = logits[:, None, :].expand(num_rows, 3, VOCAB).contiguous()
    rejected, num_rejected = rejection_sample(
        target, masked_draft, None, temperatures, seeds, positions, use_fp64=use_fp64
    )
    accepted, num_accepted = rejection_sample(
        target, matching_draft, None, temperatures, seeds, positions, use_fp64=use_fp64
    )
    # The canvas of a batch with logits processors on vLLM 0.32/0.33 (a
    # forcing processor, allowed ids): temperature applied before the
    # kernel, top-k/top-p filtered in it. One logit per request, a masked draft.
    slots = torch.arange(num_rows, dtype=torch.int64, device=device)
    canvas_tokens, canvas_num = rejection_sample_packed(
        logits,
        masked_draft[:, 0],
        torch.arange(num_rows + 1, dtype=torch.int32, device=device),
        slots,
        positions,
        temperatures,
        seeds,
        1,
        use_fp64=use_fp64,
        top_k=top_k,
        top_p=top_p,
        min_p=torch.zeros(num_rows, device=device),
    )
    assert (plain == only).all() and (fused == only).all()
    assert (num_rejected == 1).all() and (rejected[:, 0] == only).all()
    assert (num_accepted == 3).all() and (accepted == only).all()
    assert (canvas_num == 1).all() and (canvas_tokens[:, 0] == only).all()
