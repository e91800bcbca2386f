"""Rejection sampling (``vllm_sampling_plugin.ops.rejection``).

The interpreter evaluates both sides of every ``tl.where``, so numpy warns
about the -inf arithmetic the kernels mask out; those warnings are ignored.

Statistical tests use fixed seeds, so each is deterministic; a test fails when
a chi-square p-value drops below ``P_MIN`` or a binomial count leaves
``Z_MAX`` standard deviations around its expectation. Many rows with distinct
seeds in one launch give many samples per launch (the Triton interpreter
costs tens of milliseconds per program on CPU).

On the CPU those few hundred rows catch gross errors only. The exact law is
pinned in two steps: ``test_matches_independent_reference`` shows that every
token equals the NumPy model's (``rejection_reference.py``), and
``test_references.py`` shows, with draws sized for 99% power, that the
model's tokens follow the target law (not, say, the residual replaced by p).
"""

import dataclasses
import functools
import math

import pytest
import torch
from scipy import stats

from tests.integration.helpers import run_python
from tests.ops.rejection_reference import reference_rejection
from tests.vllm_lines import needs_vllm_line
from vllm_sampling_plugin.ops import (
    rejection_sample,
    rejection_sample_packed,
    unconditional_to_conditional_rates,
)
from vllm_sampling_plugin.ops.rejection import RejectionTuning
from vllm_sampling_plugin.ops.rejection import launcher as rejection_kernel
from vllm_sampling_plugin.ops.rejection.plan import plan_launch

pytestmark = [
    pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:divide by zero encountered:RuntimeWarning"),
]

# A correct sampler fails a single chi-square test with probability P_MIN.
P_MIN = 1e-3
# Two-sided binomial bound; 4 sigma keeps false alarms below 1e-4 per check.
Z_MAX = 4.0


def _chi_square_pvalue(samples: torch.Tensor, probs: torch.Tensor) -> float:
    """Goodness of fit of integer samples to ``probs``, bins with expectation < 5 merged."""
    counts = torch.bincount(samples.cpu(), minlength=probs.numel()).double()
    probs = probs.double().cpu()
    expected = probs / probs.sum() * samples.numel()
    assert counts[expected == 0].sum() == 0, "sampled a token of probability 0"
    order = torch.argsort(expected, descending=True)
    observed_bins, expected_bins = [], []
    for idx in order.tolist():
        if expected[idx] == 0:
            continue
        if expected_bins and expected_bins[-1] < 5:
            observed_bins[-1] += counts[idx].item()
            expected_bins[-1] += expected[idx].item()
        else:
            observed_bins.append(counts[idx].item())
            expected_bins.append(expected[idx].item())
    if len(expected_bins) > 1 and expected_bins[-1] < 5:
        last_observed, last_expected = observed_bins.pop(), expected_bins.pop()
        observed_bins[-1] += last_observed
        expected_bins[-1] += last_expected
    return stats.chisquare(observed_bins, expected_bins).pvalue


def _assert_binomial(count: int, trials: int, prob: float, what: str) -> None:
    if prob in (0.0, 1.0):
        assert count == prob * trials, f"{what}: {count}/{trials}, expected exactly {prob}"
        return
    sigma = math.sqrt(trials * prob * (1 - prob))
    assert abs(count - trials * prob) <= Z_MAX * sigma, (
        f"{what}: {count}/{trials}, expected {prob:.3f}"
    )


def _call(target_logits, drafts, draft_probs, temperature, seeds=None, positions=None, **kwargs):
    batch_size = target_logits.shape[0]
    device = target_logits.device
    if seeds is None:
        seeds = torch.arange(1000, 1000 + batch_size, dtype=torch.int64, device=device)
    if positions is None:
        positions = torch.arange(batch_size, dtype=torch.int64, device=device) * 7 + 3
    if not isinstance(temperature, torch.Tensor):
        temperature = torch.full((batch_size,), float(temperature), device=device)
    return rejection_sample(
        target_logits, drafts, draft_probs, temperature, seeds, positions, **kwargs
    )


def _greedy_reference(target_logits: torch.Tensor, drafts: torch.Tensor) -> list[list[int]]:
    argmax = target_logits.argmax(dim=-1)
    rows = []
    for b in range(drafts.shape[0]):
        n = 0
        while n < drafts.shape[1] and drafts[b, n] == argmax[b, n]:
            n += 1
        rows.append(drafts[b, :n].tolist() + [argmax[b, n].item()])
    return rows


def _emitted(out: torch.Tensor, num: torch.Tensor) -> list[list[int]]:
    return [out[b, : num[b]].tolist() for b in range(out.shape[0])]


def _check_padding(out: torch.Tensor, num: torch.Tensor, vocab_size: int) -> None:
    cols = torch.arange(out.shape[1], device=out.device)
    emitted = cols[None, :] < num[:, None].long()
    assert ((out >= 0) & (out < vocab_size))[emitted].all()
    assert (out[~emitted] == -1).all()
    assert ((num >= 1) & (num <= out.shape[1])).all()


# p0, p1: the target distributions of logits 0 and 1 (temperature applied).
_P0 = torch.tensor([0.45, 0.30, 0.15, 0.10, 0.0])
_P1 = torch.tensor([0.05, 0.15, 0.20, 0.25, 0.35])
_TEMPERATURE = 0.8


def _target_logits(batch_size: int, num_logits: int) -> torch.Tensor:
    """Rows whose softmax(logits / T) is _P0, _P1, then uniform; token 4 of p0 is masked."""
    probs = torch.stack([_P0, _P1] + [torch.full((5,), 0.2)] * (num_logits - 2))
    return (probs.log() * _TEMPERATURE)[None].expand(batch_size, -1, -1).contiguous()


@pytest.mark.parametrize(
    "draft_kind, use_fp64", [("probs", False), ("probs", True), ("point", False)]
)
def test_first_and_second_tokens_follow_target(device, draft_kind, use_fp64):
    """Whatever q, token 0 ~ p0, and token 1 ~ p1 given an accepted draft 0.

    Rows come in groups by draft 0: one whose q0 sits where p0 is small (most
    drafts rejected, the residual decides), one with q0 disjoint from p0
    (always rejected, the residual is p0) and one with q0 == p0 (probs; always
    accepted) or the likeliest token (point drafts). Draft 1 is adversarial
    for every row.
    """
    if draft_kind == "probs":
        q0_groups = [
            torch.tensor([0.05, 0.10, 0.25, 0.30, 0.30]),
            torch.tensor([0.0, 0.0, 0.0, 0.0, 1.0]),
            _P0,
        ]
        sizes = [120, 60, 100] if not use_fp64 else [60, 30, 60]
        q1 = torch.tensor([0.60, 0.25, 0.10, 0.05, 0.0])
        q0 = torch.cat([q.expand(n, -1) for q, n in zip(q0_groups, sizes)])
        num_rows = q0.shape[0]
        draft_probs = torch.stack([q0, q1.expand(num_rows, -1)], dim=1)
        generator = torch.Generator().manual_seed(7)
        drafts = torch.multinomial(draft_probs.reshape(-1, 5), 1, generator=generator).reshape(
            num_rows, 2
        )
        accept_probs = [torch.minimum(_P0, q).sum().item() for q in q0_groups]
        draft_probs = draft_probs.to(device)
    else:
        # n-gram drafts: fixed tokens, accepted with probability p(token).
        first_drafts = [3, 4, 0]
        sizes = [80, 60, 180]
        num_rows = sum(sizes)
        drafts = torch.tensor(sum(([[x, 0]] * n for x, n in zip(first_drafts, sizes)), []))
        accept_probs = [_P0[x].item() for x in first_drafts]
        draft_probs = None
    out, num = _call(
        _target_logits(num_rows, 3).to(device),
        drafts.to(device),
        draft_probs,
        _TEMPERATURE,
        use_fp64=use_fp64,
    )
    out, num = out.cpu(), num.cpu()
    _check_padding(out, num, 5)

    accepted = num >= 2
    assert (out[accepted, 0] == drafts[accepted, 0]).all()
    bounds = torch.tensor([0] + sizes).cumsum(0).tolist()
    for lo, hi, accept_prob in zip(bounds, bounds[1:], accept_probs):
        assert _chi_square_pvalue(out[lo:hi, 0], _P0) > P_MIN
        # The acceptance test itself: draft 0 kept with probability sum(min(p0, q0)).
        _assert_binomial(int(accepted[lo:hi].sum()), hi - lo, accept_prob, "draft 0 accepted")
    assert _chi_square_pvalue(out[:, 0], _P0) > P_MIN
    second = out[accepted, 1]
    assert second.numel() >= 60
    assert _chi_square_pvalue(second, _P1) > P_MIN


@pytest.mark.parametrize("num_drafts", [1, 3, 8])
@pytest.mark.parametrize("with_probs", [False, True])
def test_greedy_is_longest_matching_prefix_then_argmax(device, num_drafts, with_probs):
    num_rows, vocab = 8, 32  # 32 tokens: two vocabulary blocks
    generator = torch.Generator().manual_seed(num_drafts)
    target_logits = torch.randn(num_rows, num_drafts + 1, vocab, generator=generator)
    argmax = target_logits.argmax(-1)
    # Row b copies the argmax for its first b % (K + 1) drafts, then deviates.
    drafts = argmax[:, :num_drafts].clone()
    for b in range(num_rows):
        prefix = b % (num_drafts + 1)
        if prefix < num_drafts:
            drafts[b, prefix] = (argmax[b, prefix] + 1 + b) % vocab
    draft_probs = (
        torch.softmax(torch.randn(num_rows, num_drafts, vocab, generator=generator), -1)
        if with_probs
        else None
    )
    out, num = _call(
        target_logits.to(device),
        drafts.to(device),
        None if draft_probs is None else draft_probs.to(device),
        0.0,
    )
    _check_padding(out.cpu(), num.cpu(), vocab)
    assert _emitted(out.cpu(), num.cpu()) == _greedy_reference(target_logits, drafts)


def test_greedy_ties_and_vocabulary_edges(device):
    vocab = 64  # four vocabulary blocks
    target_logits = torch.zeros(4, 3, vocab)
    target_logits[0, 0, vocab - 1] = 5.0  # argmax at the last id
    target_logits[0, 1, 0] = 5.0  # argmax at id 0
    target_logits[0, 2, vocab - 1] = 5.0
    target_logits[1, :, [17, 40]] = 3.0  # tie across blocks: the lower id wins
    target_logits[2] = target_logits[0]
    target_logits[3] = target_logits[0]
    drafts = torch.tensor([[vocab - 1, 0], [17, 40], [vocab, 0], [-1, 0]])
    out, num = _call(target_logits.to(device), drafts.to(device), None, 0.0)
    # Ids outside [0, V) are never accepted.
    assert _emitted(out.cpu(), num.cpu()) == [
        [vocab - 1, 0, vocab - 1],
        [17, 17],
        [vocab - 1],
        [vocab - 1],
    ]


@pytest.mark.parametrize("with_probs", [False, True])
def test_random_rows_at_vocabulary_edges(device, with_probs):
    """Drafts 0 and V - 1 holding almost all of p are accepted; ids outside [0, V) never are."""
    vocab = 64
    target_logits = torch.zeros(3, 3, vocab)
    target_logits[:, 0, vocab - 1] = 40.0
    target_logits[:, 1, 0] = 40.0
    target_logits[:, 2, vocab - 1] = 40.0
    drafts = torch.tensor([[vocab - 1, 0], [vocab, 0], [-1, 0]])
    draft_probs = None
    if with_probs:
        draft_probs = torch.zeros(3, 2, vocab)
        draft_probs[:, 0, vocab - 1] = 1.0
        draft_probs[:, 1, 0] = 1.0
        draft_probs = draft_probs.to(device)
    out, num = _call(target_logits.to(device), drafts.to(device), draft_probs, 1.0)
    assert _emitted(out.cpu(), num.cpu()) == [[vocab - 1, 0, vocab - 1], [vocab - 1], [vocab - 1]]


def _length_to_rates(length: float, num_drafts: int) -> list[float]:
    """vLLM 0.20's minimum-variance schedule for a mean acceptance length."""
    accepted = length - 1
    full = int(accepted)
    return ([1.0] * full + [accepted - full] + [0.0] * (num_drafts - full - 1))[:num_drafts]


@pytest.mark.parametrize(
    "rates, with_probs",
    [([0.9, 0.5, 0.2], True), (_length_to_rates(2.5, 3), False)],
    ids=["rates", "length-2.5"],
)
def test_synthetic_acceptance_matches_configured_rates(device, rates, with_probs):
    num_rows, num_drafts, vocab = (320 if len(set(rates) - {0.0, 1.0}) > 1 else 160), 3, 8
    generator = torch.Generator().manual_seed(11)
    target_logits = torch.randn(num_rows, num_drafts + 1, vocab, generator=generator)
    drafts = torch.randint(0, vocab, (num_rows, num_drafts), generator=generator)
    draft_probs = (
        torch.softmax(torch.randn(num_rows, num_drafts, vocab, generator=generator), -1)
        if with_probs
        else None
    )
    temperature = torch.tensor([0.0, 0.7]).repeat(num_rows // 2)
    out, num = _call(
        target_logits.to(device),
        drafts.to(device),
        None if draft_probs is None else draft_probs.to(device),
        temperature.to(device),
        synthetic_rates=rates,
    )
    out, num = out.cpu(), num.cpu()
    _check_padding(out, num, vocab)
    num_accepted = num - 1
    for i, rate in enumerate(rates):
        _assert_binomial(int((num_accepted > i).sum()), num_rows, rate, f"position {i}")
    for greedy in (True, False):
        rows = (temperature == 0) == greedy
        for i, rate in enumerate(rates):
            _assert_binomial(
                int((num_accepted[rows] > i).sum()),
                int(rows.sum()),
                rate,
                f"position {i}, greedy={greedy}",
            )
    # Accepted positions emit the draft, whatever the tokens; greedy rejections the argmax.
    for b in range(num_rows):
        n = num_accepted[b].item()
        assert out[b, :n].tolist() == drafts[b, :n].tolist()
        if temperature[b] == 0:
            assert out[b, n].item() == target_logits[b, n].argmax().item()


def test_synthetic_rates_are_made_conditional():
    assert unconditional_to_conditional_rates([0.8, 0.6, 0.3]) == pytest.approx([0.8, 0.75, 0.5])
    assert unconditional_to_conditional_rates([1.0, 0.5, 0.0]) == [1.0, 0.5, 0.0]
    assert unconditional_to_conditional_rates([0.5, 0.0, 0.0]) == [0.5, 0.0, 0.0]


def test_non_finite_rows_stay_in_vocabulary_and_leave_other_rows_alone(device):
    num_drafts, vocab = 2, 32
    generator = torch.Generator().manual_seed(13)
    clean = torch.randn(8, num_drafts + 1, vocab, generator=generator)
    dirty = clean.clone()
    dirty[1] = float("nan")  # all NaN
    dirty[2, :, ::7] = float("nan")  # a few NaNs
    dirty[3, :, clean[3].argmax(-1)] = float("nan")  # NaN at the top logit
    dirty[4, :, 5] = float("inf")  # +inf entries
    dirty[4, :, 20] = float("inf")
    dirty[5, :, 9:30] = float("-inf")  # -inf entries
    dirty[6] = float("-inf")  # all -inf
    drafts = clean.argmax(-1)[:, :num_drafts].contiguous()
    draft_probs = torch.softmax(torch.randn(8, num_drafts, vocab, generator=generator), -1)
    for temperature in (0.0, 1.0):
        for probs in (None, draft_probs):
            args = (drafts.to(device), None if probs is None else probs.to(device), temperature)
            clean_out, _ = _call(clean.to(device), *args)
            out, num = _call(dirty.to(device), *args)
            _check_padding(out.cpu(), num.cpu(), vocab)
            for b in (0, 7):
                assert out[b].tolist() == clean_out[b].tolist()
            assert out[1, 0].item() == 0 and out[6, 0].item() == 0  # nothing finite: token 0
            assert out[4, num[4] - 1].item() in (5, 20)
            assert out[5, num[5] - 1].item() not in range(9, 30)


def test_deterministic_and_batch_invariant(device):
    num_drafts, vocab = 3, 32
    generator = torch.Generator().manual_seed(17)
    target_logits = torch.randn(6, num_drafts + 1, vocab, generator=generator)
    drafts = torch.randint(0, vocab, (6, num_drafts), generator=generator)
    drafts[:, 0] = target_logits[:, 0].argmax(-1)
    draft_probs = torch.softmax(torch.randn(6, num_drafts, vocab, generator=generator), -1)
    temperature = torch.tensor([0.0, 1.0, 0.6, 1.3, 0.0, 0.9])
    seeds = torch.tensor([5, 6, 7, 8, 9, 10])
    positions = torch.tensor([0, 100, 7, 31, 2, 64])

    def run(rows, use_fp64):
        out, num = rejection_sample(
            target_logits[rows].to(device),
            drafts[rows].to(device),
            draft_probs[rows].to(device),
            temperature[rows].to(device),
            seeds[rows].to(device),
            positions[rows].to(device),
            use_fp64=use_fp64,
        )
        return out.cpu(), num.cpu()

    for use_fp64 in (False, True):
        out, num = run([0, 1, 2, 3, 4, 5], use_fp64)
        again, again_num = run([0, 1, 2, 3, 4, 5], use_fp64)
        assert torch.equal(out, again) and torch.equal(num, again_num)
        permuted, permuted_num = run([5, 3, 1, 4, 2, 0], use_fp64)
        assert torch.equal(permuted, out[[5, 3, 1, 4, 2, 0]]) and torch.equal(
            permuted_num, num[[5, 3, 1, 4, 2, 0]]
        )
        single, single_num = run([3], use_fp64)
        assert torch.equal(single[0], out[3]) and single_num[0] == num[3]


# Launch plans that differ in every parameter, as (tuning, SM count) for
# plan_launch at V=1000, whose stats tile is 256 tokens (None: the CPU
# planner): the single launch with one block per request (the CPU default);
# one-tile blocks, one launch per step; one program per row walking two
# tiles per chunk with 64-token sampling chunks, in a single launch; and two
# programs per row with 128-token chunks, one launch per step.
_PLAN_TUNINGS = {
    "single_launch": (None, None),
    "one_tile_blocks_stepwise": (
        dataclasses.replace(rejection_kernel.TUNING[False], single_launch_programs_per_sm=0),
        None,
    ),
    "whole_row": (
        RejectionTuning(
            max_block=1024, chunk=512, sample_chunk=64, num_warps=2, programs_per_sm=1
        ),
        1,
    ),
    "half_rows_stepwise": (
        RejectionTuning(
            max_block=512,
            chunk=16,
            sample_chunk=128,
            num_warps=4,
            programs_per_sm=1,
            single_launch_programs_per_sm=0,
        ),
        1,
    ),
}


def _plan_inputs(batch_size, num_drafts, vocab, generator, device):
    target_logits = torch.randn(batch_size, num_drafts + 1, vocab, generator=generator) * 2
    argmax = target_logits.argmax(-1)
    drafts = torch.randint(0, vocab, (batch_size, num_drafts), generator=generator)
    drafts[::2] = argmax[::2, :num_drafts]  # long accepted runs on half the rows
    drafts[1, 0] = vocab - 1
    target_logits[2, 1, ::3] = float("nan")
    target_logits[3, 0, 700] = float("inf")
    draft_probs = torch.softmax(
        target_logits[:, :num_drafts].nan_to_num(0.0, 1e4, -1e4) * 0.7
        + torch.randn(batch_size, num_drafts, vocab, generator=generator),
        -1,
    )
    temperature = torch.rand(batch_size, generator=generator) + 0.5
    temperature[::3] = 0.0
    return [
        t.to(device)
        for t in (
            target_logits,
            drafts,
            draft_probs,
            temperature,
            torch.arange(batch_size) * 31 + 5,
            torch.arange(batch_size) * 17,
        )
    ]


def test_every_launch_plan_gives_the_same_tokens(monkeypatch, device):
    """Launch style, block, chunk, sampling chunk and warp count never change a token.

    Runs on CPU with the GPU planner too (``num_sms`` patched), so the plans
    below are really different: the log-sum-exp is summed in different
    orders and pieces by each (exact fixed-point sums make it the same), and
    the Gumbel-max winners are found across different lanes and programs.
    """
    num_drafts, vocab = 3, 1000
    generator = torch.Generator().manual_seed(41)
    inputs = _plan_inputs(6, num_drafts, vocab, generator, device)
    target_logits, drafts, draft_probs, temperature, seeds, positions = inputs
    plans = {
        plan_launch(6, vocab, tuning or rejection_kernel.TUNING[False], num_sms)
        for tuning, num_sms in _PLAN_TUNINGS.values()
    }
    assert len({(p.block, p.chunk, p.sample_chunk, p.num_warps) for p in plans}) == 4
    assert {(p.num_blocks > 1, p.single_launch) for p in plans} == {
        (False, True),
        (True, False),
    }
    for use_fp64, with_probs, synthetic in [
        (False, True, False),
        (True, True, False),
        (False, False, False),
        (False, True, True),
    ]:
        outputs = {}
        for name, (tuning, num_sms) in _PLAN_TUNINGS.items():
            monkeypatch.setattr(rejection_kernel, "num_sms", lambda device, n=num_sms: n)
            monkeypatch.setattr(
                "vllm_sampling_plugin.ops.rejection.functional.rejection_sample_packed",
                functools.partial(rejection_kernel.rejection_sample_packed, tuning=tuning),
            )
            out, num = rejection_sample(
                target_logits,
                drafts,
                draft_probs if with_probs else None,
                temperature,
                seeds,
                positions,
                synthetic_rates=[0.8, 0.5, 0.3] if synthetic else None,
                use_fp64=use_fp64,
            )
            _check_padding(out, num, vocab)
            outputs[name] = (out, num)
        reference = outputs["single_launch"]
        # Not a degenerate case: rows stop after different numbers of drafts.
        assert len(set(reference[1].tolist())) > 1
        for name, (out, num) in outputs.items():
            assert torch.equal(out, reference[0]) and torch.equal(num, reference[1]), (
                f"plan {name} differs (use_fp64={use_fp64}, probs={with_probs}, "
                f"synthetic={synthetic})"
            )


def _reference_case(num_rows: int, num_drafts: int, vocab: int, seed: int):
    """Rows whose drafts are often rejected: q leans towards p's unlikely tokens,
    so the residual max(p - q, 0) is far from p. Temperatures 0 (greedy),
    0.5, 1 and 1.7 cycle over the rows; seeds span the int64 range."""
    generator = torch.Generator().manual_seed(seed)
    target_logits = torch.randn(num_rows, num_drafts + 1, vocab, generator=generator) * 1.5
    draft_probs = torch.softmax(
        -target_logits[:, :num_drafts] + torch.randn(num_rows, num_drafts, vocab, generator=generator),
        -1,
    )
    drafts = torch.multinomial(draft_probs.reshape(-1, vocab), 1, generator=generator)
    drafts = drafts.reshape(num_rows, num_drafts)
    # Long accepted runs on every third row: sharp targets, the argmax as draft.
    target_logits[::3] *= 3
    drafts[::3] = target_logits[::3, :num_drafts].argmax(-1)
    temperature = torch.tensor([0.0, 0.5, 1.0, 1.7]).repeat(num_rows)[:num_rows]
    seeds = torch.randint(-(2**63), 2**63 - 1, (num_rows,), generator=generator)
    positions = torch.randint(0, 2**40, (num_rows,), generator=generator)
    return target_logits, drafts, draft_probs, temperature, seeds, positions


@pytest.mark.parametrize("use_fp64", [False, True], ids=["fp32", "fp64"])
@pytest.mark.parametrize("with_probs", [True, False], ids=["draft_probs", "point_drafts"])
def test_matches_independent_reference(device, use_fp64, with_probs):
    """Every emitted token equals the NumPy model of the documented law and
    streams (``rejection_reference.py``): acceptance uniforms, the residual's
    own noise stream, the bonus on the sampler's stream, temperature applied.

    The model computes in float64, the kernel in float32; every decision of
    these inputs is at least ``1e-3`` from its boundary, far beyond their
    rounding, so the comparison is exact.
    """
    num_rows, num_drafts, vocab = 24, 2, 40
    target_logits, drafts, draft_probs, temperature, seeds, positions = _reference_case(
        num_rows, num_drafts, vocab, seed=43 + use_fp64
    )
    if not with_probs:
        draft_probs = None
    want = reference_rejection(
        target_logits, drafts, draft_probs, temperature, seeds, positions, use_fp64=use_fp64
    )
    assert want.margin > 1e-3
    out, num = rejection_sample(
        target_logits.to(device),
        drafts.to(device),
        None if draft_probs is None else draft_probs.to(device),
        temperature.to(device),
        seeds.to(device),
        positions.to(device),
        use_fp64=use_fp64,
    )
    assert _emitted(out.cpu(), num.cpu()) == want.tokens
    # Not a degenerate case: random rows (temperature > 0) reject their first
    # draft (a residual sample) and accept every draft (the bonus).
    random_rows = (temperature > 0).nonzero().flatten().tolist()
    assert {1, num_drafts + 1} <= {len(want.tokens[b]) for b in random_rows}


def test_seed_and_position_change_the_draw(device):
    num_rows, vocab = 64, 16
    target_logits = torch.zeros(num_rows, 2, vocab)
    drafts = torch.full((num_rows, 1), -1)  # never accepted: token 0 is a draw from p
    seeds = torch.full((num_rows,), 42)
    out, _ = _call(target_logits.to(device), drafts.to(device), None, 1.0, seeds=seeds.to(device))
    # The same seed at 64 positions draws from the uniform p: not all equal.
    assert out[:, 0].unique().numel() > 8


def test_packed_layout_matches_independent_reference(device):
    """Uneven drafts per request, a permuted slot mapping and Eagle's [slots, K, V] draft logits."""
    num_spec, vocab = 3, 40
    num_drafts = [3, 0, 1, 2, 3]
    slots = [4, 1, 6, 2, 0]
    generator = torch.Generator().manual_seed(19)
    num_slots = 8
    temperature = torch.tensor([0.9, 0.0, 1.0, 0.7, 1.2, 0.0, 0.5, 0.8])
    seeds = torch.arange(50, 50 + num_slots)
    draft_logits = torch.randn(num_slots, num_spec, vocab, generator=generator)
    rows, draft_column, pos, cu = [], [], [], [0]
    per_request = []
    for r, (n, slot) in enumerate(zip(num_drafts, slots)):
        logits = torch.randn(n + 1, vocab, generator=generator)
        drafts = torch.randint(0, vocab, (n,), generator=generator)
        start = 10 * r + 5
        rows.append(logits / (temperature[slot] if temperature[slot] > 0 else 1.0))
        draft_column += [7] + drafts.tolist()  # entry 0 is the previous token, unused
        pos += list(range(start, start + n + 1))
        cu.append(cu[-1] + n + 1)
        per_request.append((logits, drafts, start))
    sampled, num_sampled = rejection_sample_packed(
        torch.cat(rows).to(device),
        torch.tensor(draft_column, dtype=torch.int32, device=device),
        torch.tensor(cu, dtype=torch.int32, device=device),
        torch.tensor(slots, dtype=torch.int32, device=device),
        torch.tensor(pos, dtype=torch.int64, device=device),
        temperature.to(device),
        seeds.to(device),
        num_spec,
        draft_logits.to(device),
    )
    assert sampled.shape == (5, num_spec + 1) and sampled.dtype == torch.int64
    assert num_sampled.dtype == torch.int32
    _check_padding(sampled.cpu(), num_sampled.cpu(), vocab)
    for r, ((logits, drafts, start), slot) in enumerate(zip(per_request, slots)):
        n = drafts.numel()
        if n == 0:
            # No drafts: the bonus position alone; greedy here, so its argmax.
            assert num_sampled[r].item() == 1 and sampled[r, 0].item() == logits[0].argmax().item()
            continue
        # The NumPy model (q normalised in float64, the kernel's from the raw
        # draft logits: far from every boundary, as the margin shows).
        want = reference_rejection(
            logits[None],
            drafts[None],
            torch.softmax(draft_logits[slot, :n].double(), -1)[None],
            temperature[slot : slot + 1],
            seeds[slot : slot + 1],
            [start],
            use_fp64=False,
        )
        assert want.margin > 1e-3
        assert sampled[r, : num_sampled[r]].tolist() == want.tokens[0]


def test_draft_and_target_logits_in_bfloat16_read_as_their_float32_values(device):
    """The runner's raw logits and vLLM 0.33's draft-logits cache
    (``draft_logits_spec``: the model's head dtype) are bfloat16 for a
    bfloat16 model: the kernel reads them as the float32 numbers they hold,
    so the tokens are exactly those of the same values in float32."""
    num_reqs, num_spec, vocab = 16, 3, 40
    generator = torch.Generator().manual_seed(31)
    target = torch.randn(num_reqs, num_spec + 1, vocab, generator=generator).to(torch.bfloat16)
    stored = (target[:, :num_spec].float()
              + torch.randn(num_reqs, num_spec, vocab, generator=generator)).to(torch.bfloat16)
    drafts = torch.multinomial(torch.softmax(stored.float(), -1).reshape(-1, vocab), 1,
                               generator=generator).reshape(num_reqs, num_spec)
    draft_column = torch.cat([torch.zeros(num_reqs, 1, dtype=torch.int64), drafts], 1)
    case = dict(
        draft_tokens=draft_column.reshape(-1).to(device),
        cu_num_logits=torch.arange(0, num_reqs * (num_spec + 1) + 1, num_spec + 1,
                                   dtype=torch.int32, device=device),
        idx_mapping=torch.arange(num_reqs, dtype=torch.int32, device=device),
        pos=torch.arange(num_reqs * (num_spec + 1), dtype=torch.int64, device=device) + 5,
        temperature=torch.tensor([0.0, 0.7, 1.0, 1.5] * (num_reqs // 4), device=device),
        seeds=torch.arange(70, 70 + num_reqs).to(device),
        num_speculative_steps=num_spec,
        apply_temperature=True,
        scale_draft_logits=True,
    )
    in_bfloat16 = rejection_sample_packed(
        target.reshape(-1, vocab).to(device), draft_logits=stored.to(device), **case)
    in_float32 = rejection_sample_packed(
        target.reshape(-1, vocab).float().to(device), draft_logits=stored.float().to(device),
        **case)
    assert _emitted(*in_bfloat16) == _emitted(*in_float32)
    # Not vacuous: some drafts are accepted and some rejected.
    lengths = {len(row) for row in _emitted(*in_float32)}
    assert min(lengths) <= num_spec and max(lengths) == num_spec + 1, lengths


def test_draft_logits_before_the_temperature_are_divided_by_it(device):
    """``scale_draft_logits``: vLLM 0.32/0.33's drafters cache their logits
    before the temperature. The kernel then verifies against softmax(d / T):
    the tokens are exactly those of the same call on d / T divided up front
    (float32 division both ways), and not those of d read as it is."""
    num_reqs, num_spec, vocab = 24, 3, 40
    generator = torch.Generator().manual_seed(23)
    temperature = torch.tensor([0.5, 0.7, 1.3, 2.0] * (num_reqs // 4))
    seeds = torch.arange(300, 300 + num_reqs)
    # Target and draft close enough that drafts are often accepted, far
    # enough that the temperature moves q(draft) across the uniforms.
    target = torch.randn(num_reqs, num_spec + 1, vocab, generator=generator)
    stored = target[:, :num_spec] + torch.randn(num_reqs, num_spec, vocab, generator=generator)
    drafts = torch.multinomial(
        torch.softmax(stored / temperature[:, None, None], -1).reshape(-1, vocab), 1,
        generator=generator,
    ).reshape(num_reqs, num_spec)
    draft_column = torch.cat([torch.zeros(num_reqs, 1, dtype=torch.int64), drafts], 1)
    case = dict(
        target_logits=target.reshape(-1, vocab).to(device),
        draft_tokens=draft_column.reshape(-1).to(device),
        cu_num_logits=torch.arange(0, num_reqs * (num_spec + 1) + 1, num_spec + 1,
                                   dtype=torch.int32, device=device),
        idx_mapping=torch.arange(num_reqs, dtype=torch.int32, device=device),
        pos=torch.arange(num_reqs * (num_spec + 1), dtype=torch.int64, device=device) + 11,
        temperature=temperature.to(device),
        seeds=seeds.to(device),
        num_speculative_steps=num_spec,
        apply_temperature=True,
    )
    scaled_in_kernel = rejection_sample_packed(
        **case, draft_logits=stored.to(device), scale_draft_logits=True
    )
    scaled_before = rejection_sample_packed(
        **case, draft_logits=(stored / temperature[:, None, None]).to(device)
    )
    read_as_stored = rejection_sample_packed(**case, draft_logits=stored.to(device))
    assert _emitted(*scaled_in_kernel) == _emitted(*scaled_before)
    assert _emitted(*scaled_in_kernel) != _emitted(*read_as_stored)


def test_bad_inputs_raise_value_error_naming_the_argument(device):
    logits = torch.zeros(2, 3, 8, device=device)
    drafts = torch.zeros(2, 2, dtype=torch.int64, device=device)
    temperature = torch.ones(2, device=device)
    seeds = torch.zeros(2, dtype=torch.int64, device=device)
    positions = torch.zeros(2, dtype=torch.int64, device=device)

    def call(**overrides):
        kwargs = dict(
            target_logits=logits,
            draft_token_ids=drafts,
            draft_probs=None,
            temperature=temperature,
            seeds=seeds,
            positions=positions,
        )
        kwargs.update(overrides)
        return rejection_sample(**kwargs)

    cases = [
        ("target_logits", dict(target_logits=torch.zeros(2, 8, device=device))),
        (
            "target_logits",
            dict(target_logits=torch.zeros(2, 3, 8, dtype=torch.int64, device=device)),
        ),
        ("draft_token_ids", dict(draft_token_ids=drafts.int())),
        (
            "draft_token_ids",
            dict(draft_token_ids=torch.zeros(2, 3, dtype=torch.int64, device=device)),
        ),
        (
            "draft_token_ids",
            dict(target_logits=torch.zeros(2, 1, 8, device=device), draft_token_ids=drafts[:, :0]),
        ),
        ("draft_probs", dict(draft_probs=torch.ones(2, 2, 7, device=device))),
        ("draft_probs", dict(draft_probs=torch.full((2, 2, 8), -0.1, device=device))),
        ("draft_probs", dict(draft_probs=torch.full((2, 2, 8), float("nan"), device=device))),
        ("use_fp64", dict(use_fp64="yes")),
        ("temperature", dict(temperature=torch.ones(3, device=device))),
        ("temperature", dict(temperature=torch.tensor([1.0, -0.5], device=device))),
        ("seeds", dict(seeds=seeds.int())),
        ("positions", dict(positions=positions[:1])),
        ("synthetic_rates", dict(synthetic_rates=[0.5])),
        ("synthetic_rates", dict(synthetic_rates=[0.5, 1.5])),
        ("synthetic_rates", dict(synthetic_rates=[0.2, 0.5])),
    ]
    for name, overrides in cases:
        with pytest.raises(ValueError, match=name):
            call(**overrides)


_LARGE_VOCAB = 151936  # 19 blocks of 8192 (the last one partial), chunks of 2048 and 512


def _packed_case(num_reqs: int, num_spec: int, logits_row: torch.Tensor, drafts: torch.Tensor):
    """Packed runner inputs whose every target row is ``logits_row`` (a stride-0 view)."""
    vocab = logits_row.numel()
    num_logits = num_reqs * (num_spec + 1)
    draft_sampled = torch.zeros(num_reqs, num_spec + 1, dtype=torch.int32, device="cuda")
    draft_sampled[:, 1:] = drafts
    return dict(
        target_logits=logits_row[None].expand(num_logits, vocab),
        draft_tokens=draft_sampled.view(-1),
        cu_num_logits=torch.arange(num_reqs + 1, dtype=torch.int32, device="cuda") * (num_spec + 1),
        idx_mapping=torch.arange(num_reqs, dtype=torch.int32, device="cuda"),
        pos=torch.arange(num_logits, dtype=torch.int64, device="cuda"),
        temperature=torch.ones(num_reqs, device="cuda"),
        seeds=torch.arange(num_reqs, dtype=torch.int64, device="cuda") * 7919,
        num_speculative_steps=num_spec,
    )


@pytest.mark.gpu
@pytest.mark.parametrize("use_fp64", [False, True])
@pytest.mark.parametrize("with_draft_logits", [False, True])
def test_large_vocabulary_first_token_follows_target_gpu(use_fp64, with_draft_logits):
    """200k requests over a real vocabulary: support at chunk and block edges and at V - 1."""
    num_reqs = 200_000
    tokens = torch.tensor(
        [0, 511, 512, 2047, 2048, 8191, 8192, 80000, _LARGE_VOCAB - 1], device="cuda"
    )
    p = torch.tensor([0.2, 0.05, 0.1, 0.05, 0.1, 0.1, 0.15, 0.15, 0.1], device="cuda")
    q = torch.tensor([0.01, 0.2, 0.02, 0.2, 0.02, 0.05, 0.1, 0.1, 0.3], device="cuda")
    target_row = torch.full((_LARGE_VOCAB,), float("-inf"), device="cuda")
    target_row[tokens] = p.log()
    generator = torch.Generator(device="cuda").manual_seed(23)
    if with_draft_logits:
        draft_row = torch.full((_LARGE_VOCAB,), float("-inf"), device="cuda")
        draft_row[tokens] = q.log() + 3.0  # unnormalised on purpose
        draft_logits = draft_row[None, None].expand(num_reqs, 1, _LARGE_VOCAB)
        drafts = tokens[torch.multinomial(q, num_reqs, replacement=True, generator=generator)]
        accept_prob = torch.minimum(p, q).sum().item()
    else:
        draft_logits = None
        drafts = torch.full((num_reqs,), _LARGE_VOCAB - 1, device="cuda")
        accept_prob = p[-1].item()
    sampled, num = rejection_sample_packed(
        **_packed_case(num_reqs, 1, target_row, drafts[:, None]),
        draft_logits=draft_logits,
        use_fp64=use_fp64,
    )
    first = sampled[:, 0]
    index = (first[:, None] == tokens[None]).int().argmax(-1)
    assert torch.isin(first, tokens).all()
    assert _chi_square_pvalue(index, p) > P_MIN
    _assert_binomial(int((num == 2).sum()), num_reqs, accept_prob, "draft accepted")


@pytest.mark.gpu
@pytest.mark.parametrize("num_drafts", [1, 5])
def test_large_vocabulary_greedy_gpu(num_drafts):
    num_rows = 64
    generator = torch.Generator(device="cuda").manual_seed(29)
    target_logits = torch.randn(
        num_rows, num_drafts + 1, _LARGE_VOCAB, generator=generator, device="cuda"
    )
    argmax = target_logits.argmax(-1)
    drafts = argmax[:, :num_drafts].clone()
    for b in range(num_rows):
        prefix = b % (num_drafts + 1)
        if prefix < num_drafts:
            drafts[b, prefix] = (argmax[b, prefix] + 1 + 977 * b) % _LARGE_VOCAB
    out, num = _call(target_logits, drafts, None, 0.0)
    assert _emitted(out.cpu(), num.cpu()) == _greedy_reference(target_logits.cpu(), drafts.cpu())


@needs_vllm_line("0.20", why="the reference is 0.20's FP64 Gumbel kernel")
def test_fp64_bonus_token_is_stock_vllm_sample_on_cpu():
    """q == p accepts every draft; the bonus is then what vLLM 0.20's sampler
    draws there. vLLM's kernel runs under the interpreter once no CUDA device
    is visible (in a fresh interpreter: this process's vLLM is left alone)."""
    run_python(
        """
        import torch
        from vllm.v1.worker.gpu.sample.gumbel import gumbel_sample as stock_gumbel_sample
        from vllm_sampling_plugin.ops import rejection_sample_packed

        num_reqs, num_spec, vocab = 6, 2, 700
        generator = torch.Generator().manual_seed(31)
        num_logits = num_reqs * (num_spec + 1)
        target_logits = torch.randn(num_logits, vocab, generator=generator) * 3
        rows = target_logits.view(num_reqs, num_spec + 1, vocab)
        draft_tokens = torch.zeros(num_reqs, num_spec + 1, dtype=torch.int32)
        draft_tokens[:, 1:] = torch.randint(0, vocab, (num_reqs, num_spec), generator=generator)
        idx_mapping = torch.arange(num_reqs, dtype=torch.int32)
        pos = torch.randint(0, 1 << 30, (num_logits,), generator=generator)
        temperature = torch.ones(num_reqs)
        seeds = torch.randint(-(2**63), 2**63 - 1, (num_reqs,), generator=generator)
        sampled, num = rejection_sample_packed(
            target_logits, draft_tokens.view(-1),
            torch.arange(num_reqs + 1, dtype=torch.int32) * (num_spec + 1), idx_mapping, pos,
            temperature, seeds, num_spec, rows[:, :num_spec].contiguous(), use_fp64=True,
        )
        assert (num == num_spec + 1).all(), num
        bonus_rows = torch.arange(num_reqs) * (num_spec + 1) + num_spec
        expected = stock_gumbel_sample(
            target_logits[bonus_rows], idx_mapping, temperature, seeds, pos[bonus_rows],
            apply_temperature=False,
        )
        assert torch.equal(sampled[:, num_spec], expected), (sampled, expected)
        """,
        env={"CUDA_VISIBLE_DEVICES": "", "TRITON_INTERPRET": "1"},
    )


@pytest.mark.gpu
def test_fp64_bonus_token_is_stock_vllm_sample_gpu():
    """q == p accepts every draft; the bonus is then what vLLM 0.20's sampler draws there."""
    stock = pytest.importorskip("vllm.v1.worker.gpu.sample.gumbel")
    num_reqs, num_spec = 256, 2
    generator = torch.Generator(device="cuda").manual_seed(31)
    num_logits = num_reqs * (num_spec + 1)
    target_logits = torch.randn(num_logits, _LARGE_VOCAB, generator=generator, device="cuda") * 3
    rows = target_logits.view(num_reqs, num_spec + 1, _LARGE_VOCAB)
    draft_logits = rows[:, :num_spec].contiguous()
    drafts = torch.randint(
        0, _LARGE_VOCAB, (num_reqs, num_spec), generator=generator, device="cuda"
    )
    case = _packed_case(num_reqs, num_spec, target_logits[0], drafts)
    case["target_logits"] = target_logits
    case["seeds"] = torch.randint(
        -(2**63), 2**63 - 1, (num_reqs,), generator=generator, device="cuda"
    )
    sampled, num = rejection_sample_packed(**case, draft_logits=draft_logits, use_fp64=True)
    assert (num == num_spec + 1).all()
    bonus_rows = torch.arange(num_reqs, device="cuda") * (num_spec + 1) + num_spec
    expected = stock.gumbel_sample(
        target_logits[bonus_rows],
        case["idx_mapping"],
        case["temperature"],
        case["seeds"],
        case["pos"][bonus_rows],
        apply_temperature=False,
    )
    assert torch.equal(sampled[:, num_spec], expected)


@pytest.mark.gpu
def test_cuda_graph_replay_matches_eager_gpu():
    num_reqs, num_spec, vocab = 16, 3, 4096
    generator = torch.Generator(device="cuda").manual_seed(37)

    def fill(case, draft_logits):
        case["target_logits"].copy_(
            torch.randn(case["target_logits"].shape, generator=generator, device="cuda")
        )
        draft_logits.copy_(torch.randn(draft_logits.shape, generator=generator, device="cuda"))
        case["draft_tokens"].copy_(
            torch.randint(0, vocab, case["draft_tokens"].shape, generator=generator, device="cuda")
        )

    case = _packed_case(
        num_reqs,
        num_spec,
        torch.zeros(vocab, device="cuda"),
        torch.zeros(num_reqs, num_spec, device="cuda"),
    )
    case["target_logits"] = torch.empty(num_reqs * (num_spec + 1), vocab, device="cuda")
    case["temperature"] = torch.tensor([0.0, 1.0, 0.7, 1.3] * (num_reqs // 4), device="cuda")
    draft_logits = torch.empty(num_reqs, num_spec, vocab, device="cuda")
    fill(case, draft_logits)
    rejection_sample_packed(**case, draft_logits=draft_logits)  # compile outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured, captured_num = rejection_sample_packed(**case, draft_logits=draft_logits)
    for _ in range(3):
        fill(case, draft_logits)
        graph.replay()
        eager, eager_num = rejection_sample_packed(**case, draft_logits=draft_logits)
        assert torch.equal(captured, eager) and torch.equal(captured_num, eager_num)


@pytest.mark.gpu
@pytest.mark.parametrize("num_reqs", [1, 24, 200])
@pytest.mark.parametrize("use_fp64", [False, True])
def test_single_launch_matches_step_by_step_gpu(num_reqs, use_fp64):
    """The two launch styles give the same tokens on the GPU, where the single
    launch has many blocks per request meeting at its barriers (the CPU
    interpreter gives it one block per request)."""
    num_spec, vocab = 3, _LARGE_VOCAB
    generator = torch.Generator(device="cuda").manual_seed(num_reqs)
    num_logits = num_reqs * (num_spec + 1)
    target_logits = torch.randn(num_logits, vocab, generator=generator, device="cuda") * 3
    rows = target_logits.view(num_reqs, num_spec + 1, vocab)[:, :num_spec]
    draft_logits = rows + 0.5 * torch.randn(rows.shape, generator=generator, device="cuda")
    draft_tokens = torch.zeros(num_reqs, num_spec + 1, dtype=torch.int32, device="cuda")
    draft_tokens[:, 1:] = draft_logits.argmax(-1)
    temperature = torch.tensor([0.0, 1.0, 0.7], device="cuda").repeat(num_reqs)[:num_reqs]
    args = (
        target_logits,
        draft_tokens.view(-1),
        torch.arange(num_reqs + 1, dtype=torch.int32, device="cuda") * (num_spec + 1),
        torch.arange(num_reqs, dtype=torch.int32, device="cuda"),
        torch.arange(num_logits, dtype=torch.int64, device="cuda") + 1000,
        temperature,
        torch.arange(num_reqs, dtype=torch.int64, device="cuda") * 7919,
        num_spec,
    )
    base = rejection_kernel.TUNING[use_fp64]
    outputs = [
        rejection_sample_packed(
            *args,
            draft_logits,
            use_fp64=use_fp64,
            tuning=dataclasses.replace(base, single_launch_programs_per_sm=per_sm),
        )
        for per_sm in (0, 1 << 20)  # never, always
    ]
    single, stepwise = outputs
    assert torch.equal(single[0], stepwise[0]) and torch.equal(single[1], stepwise[1])
    # Not a degenerate case: acceptance varies from request to request.
    assert num_reqs == 1 or len(set(single[1].tolist())) > 1


@pytest.mark.gpu
def test_drafts_drawn_with_the_samplers_noise_leave_the_target_distribution_gpu():
    """Eagle draws draft j with the sampler's noise at logit j's position and seed.

    Were the corrected token drawn with that same noise, token 0 would come out
    about (0.476, 0.274, 0.150, 0.100) instead of p0 (simulated), which 200k
    rows detect by far; the residual has its own stream.
    """
    from vllm_sampling_plugin.ops import sample

    num_rows = 200_000
    q0 = torch.tensor([0.05, 0.10, 0.25, 0.30, 0.30], device="cuda")
    target_logits = _P0.log().cuda()[None, None].expand(num_rows, 2, -1).contiguous()
    seeds = torch.arange(num_rows, dtype=torch.int64, device="cuda") * 104729
    positions = torch.arange(num_rows, dtype=torch.int64, device="cuda") % 4096
    ones = torch.ones(num_rows, device="cuda")
    drafts = sample(q0.log()[None].expand(num_rows, -1).contiguous(), ones, seeds, positions)
    out, num = rejection_sample(
        target_logits,
        drafts[:, None],
        q0[None, None].expand(num_rows, 1, -1).contiguous(),
        ones,
        seeds,
        positions,
    )
    assert _chi_square_pvalue(out[:, 0], _P0) > P_MIN
    _assert_binomial(
        int((num == 2).sum()), num_rows, torch.minimum(_P0, q0.cpu()).sum().item(), "accepted"
    )
