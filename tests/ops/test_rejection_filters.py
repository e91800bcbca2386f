"""Top-k, top-p and min_p folded into verification (``ops/rejection/filters.py``).

vLLM 0.33 verifies drafts against its processed target: temperature, then
min_p, then top-k, then top-p on what top-k kept (``sample/sampler.py``
``apply_sampling_params``). ``rejection_sample(..., top_k=, top_p=, min_p=)``
must verify against that filtered law from the raw logits. The law is
computed here, independently, in float64 (``_filtered``); the tests check

* exact tokens: the kernel with the filters folded in gives, token for
  token, what the NumPy model of the rejection sampler
  (``rejection_reference.py``) and the unfiltered kernel give on logits
  masked by ``_filtered`` (every decision far from its boundary);
* the law on the kernel itself: chi-square of the first emitted token
  against the filtered ``p0`` (drafts never accepted, point drafts, draft
  probabilities) and of the second one against the filtered ``p1``;
* drafts outside the filtered support are never accepted; greedy rows are
  not filtered; batch composition and launch style change no token.

The statistical tests use few hundred rows of a 10-token vocabulary (the
interpreter costs tens of milliseconds per program); a token of filtered
probability 0 fails them outright.
"""

import dataclasses
import functools
import math

import numpy as np
import pytest
import torch

from tests.ops.interpreter_warnings import IGNORE_MASKED_ARITHMETIC
from tests.ops.rejection_reference import reference_rejection
from tests.ops.test_rejection import P_MIN, _assert_binomial, _chi_square_pvalue
from vllm_sampling_plugin.ops import rejection_sample, rejection_sample_packed
from vllm_sampling_plugin.ops.rejection import launcher as rejection_kernel

pytestmark = IGNORE_MASKED_ARITHMETIC

# Filter settings (top_k, top_p, min_p); 0 / 1.0 / 0.0 are off.
FILTERS = {
    "top_k": (3, 1.0, 0.0),
    "top_p": (0, 0.75, 0.0),
    "min_p": (0, 1.0, 0.12),
    "combined": (6, 0.8, 0.04),
}


def _filtered(row: np.ndarray, temperature: float, top_k: int, top_p: float, min_p: float):
    """vLLM 0.33's processed target of one raw logit row, in float64.

    Returns (keep mask, filtered probabilities, margin): the margin is how
    far the row's cuts are from their boundaries (logit gaps at the min_p and
    top-k cuts, mass gaps at the top-p cut), so a test can show that float32
    rounding cannot move them.
    """
    scaled = (np.float32(row) / np.float32(temperature)).astype(np.float64)  # fp32 division
    vocab = scaled.size
    keep = np.ones(vocab, dtype=bool)
    margin = math.inf
    if min_p > 0:
        # sample/min_p.py: logits < max + log(min_p) (float32) become -inf.
        cut = np.float32(scaled.max()) + np.log(np.float32(min_p))
        keep &= scaled >= cut
        margin = min(margin, np.abs(scaled - cut).min())
    if 0 < top_k < vocab:
        ranked = np.sort(scaled[keep])[::-1]
        if ranked.size > top_k:
            keep &= scaled >= ranked[top_k - 1]
            margin = min(margin, ranked[top_k - 1] - ranked[top_k])
    if top_p < 1:
        probs = np.where(keep, np.exp(scaled - scaled.max()), 0.0)
        probs /= probs.sum()
        order = np.argsort(-probs, kind="stable")
        mass_before = np.concatenate([[0.0], np.cumsum(probs[order])[:-1]])
        kept = order[mass_before < top_p]
        top_p_keep = np.zeros(vocab, dtype=bool)
        top_p_keep[kept] = True
        keep &= top_p_keep
        margin = min(margin, np.abs(mass_before[probs[order] > 0] - top_p).min())
    probs = np.where(keep, np.exp(scaled - scaled.max()), 0.0)
    return keep, probs / probs.sum(), margin


def _masked(logits, temperature, top_k, top_p, min_p):
    """Raw logits [B, K + 1, V] with -inf where rows with temperature > 0 are
    filtered out (what vLLM 0.33's canvas holds, before the temperature), and
    the smallest margin of any cut."""
    masked = logits.clone()
    margin = math.inf
    for b in range(logits.shape[0]):
        if temperature[b] == 0:
            continue
        for j in range(logits.shape[1]):
            keep, _, row_margin = _filtered(
                logits[b, j].numpy(), float(temperature[b]), int(top_k[b]), float(top_p[b]),
                float(min_p[b]),
            )
            masked[b, j, ~torch.from_numpy(keep)] = float("-inf")
            margin = min(margin, row_margin)
    return masked, margin


def _filter_tensors(settings, device):
    top_k, top_p, min_p = zip(*settings)
    return (
        torch.tensor(top_k, dtype=torch.int32, device=device),
        torch.tensor(top_p, dtype=torch.float32, device=device),
        torch.tensor(min_p, dtype=torch.float32, device=device),
    )


def _emitted(out, num):
    return [out[b, : num[b]].tolist() for b in range(out.shape[0])]


def test_filtered_law_follows_upstreams_order():
    """The float64 law itself: min_p before top-p changes top-p's mass, and
    each filter alone keeps what its definition says (not a vacuous helper)."""
    row = np.log(np.array([0.40, 0.25, 0.15, 0.10, 0.05, 0.03, 0.02]))
    keep, probs, _ = _filtered(row, 1.0, 0, 0.75, 0.0)
    assert keep.tolist() == [True, True, True, False, False, False, False]
    keep, _, _ = _filtered(row, 1.0, 2, 1.0, 0.0)
    assert keep.sum() == 2
    keep, _, _ = _filtered(row, 1.0, 0, 1.0, 0.2)  # keeps p >= 0.2 * 0.40
    assert keep.tolist() == [True, True, True, True, False, False, False]
    # min_p first, as vLLM: top-p 0.70 of the min_p set {0.40, 0.25, 0.15,
    # 0.10} (renormalised: 0.44, 0.28, ...) keeps two tokens; top-p 0.70 of
    # the whole row keeps three, all of which min_p would keep.
    keep, probs, _ = _filtered(row, 1.0, 0, 0.70, 0.2)
    assert keep.sum() == 2 and np.isclose(probs.sum(), 1.0)
    assert _filtered(row, 1.0, 0, 0.70, 0.0)[0].sum() == 3


@pytest.mark.parametrize(
    "mode", ["point_drafts", "draft_probs", "synthetic"]
)
def test_tokens_equal_the_model_on_filtered_logits(device, mode):
    """Exact: folded filters == the NumPy model and the unfiltered kernel on
    the masked logits, rows of every filter setting, greedy rows among them."""
    num_rows, num_drafts, vocab = 20, 2, 40
    generator = torch.Generator().manual_seed(57)  # every cut > 1e-3 from its boundary
    logits = torch.randn(num_rows, num_drafts + 1, vocab, generator=generator) * 1.5
    draft_probs = torch.softmax(torch.randn(num_rows, num_drafts, vocab, generator=generator), -1)
    drafts = torch.multinomial(draft_probs.reshape(-1, vocab), 1, generator=generator).reshape(
        num_rows, num_drafts
    )
    # Half the rows draft the target argmax: long accepted runs, bonus tokens.
    drafts[::2] = logits[::2, :num_drafts].argmax(-1)
    temperature = torch.tensor([0.0, 0.6, 1.0, 1.4]).repeat(5)
    settings = [list(FILTERS.values())[b % 5 - 1] if b % 5 else (0, 1.0, 0.0) for b in range(20)]
    settings[1] = (1, 1.0, 0.0)  # top_k = 1 on a random row: its argmax always
    # Rows where the order matters: top-p of the min_p set, of the top-k set.
    settings[5] = (0, 0.6, 0.3)
    settings[9] = (4, 0.7, 0.0)
    settings[13] = (5, 0.75, 0.2)
    top_k, top_p, min_p = _filter_tensors(settings, "cpu")
    seeds = torch.arange(num_rows) * 7919 + 3
    positions = torch.arange(num_rows) * 13
    masked, margin = _masked(logits, temperature, top_k, top_p, min_p)
    assert margin > 1e-3
    with_probs = mode != "point_drafts"
    rates = [0.7, 0.4] if mode == "synthetic" else None

    def run(target, **filters):
        out, num = rejection_sample(
            target.to(device),
            drafts.to(device),
            draft_probs.to(device) if with_probs else None,
            temperature.to(device),
            seeds.to(device),
            positions.to(device),
            synthetic_rates=rates,
            **{name: t.to(device) for name, t in filters.items()},
        )
        return _emitted(out.cpu(), num.cpu())

    folded = run(logits, top_k=top_k, top_p=top_p, min_p=min_p)
    assert folded == run(masked)
    if rates is None:
        want = reference_rejection(
            masked, drafts, draft_probs if with_probs else None, temperature, seeds, positions,
            use_fp64=False,
        )
        assert want.margin > 1e-3
        assert folded == want.tokens
    # The filters bind: without them some row emits a token they remove.
    assert run(logits) != folded
    for b, tokens in enumerate(folded):
        for j, token in enumerate(tokens):
            # Synthetic mode accepts drafts whatever they are; what it draws
            # (the last token) is in the support.
            if rates is None or j == len(tokens) - 1:
                assert masked[b, j, token] > float("-inf")


def _law_case(setting, vocab=10, seed=11):
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(2, vocab, generator=generator) * 1.2
    keep0, p0, _ = _filtered(logits[0].numpy(), 0.9, *setting)
    keep1, p1, _ = _filtered(logits[1].numpy(), 0.9, *setting)
    return logits, (keep0, torch.from_numpy(p0)), (keep1, torch.from_numpy(p1))


@pytest.mark.parametrize("name", list(FILTERS))
def test_emitted_tokens_follow_the_filtered_target(device, name):
    """Token 0 ~ filtered p0 whatever the drafts; token 1 ~ filtered p1 after
    an accepted draft 0; draft 0 accepted as often as the filtered law says.

    Groups of rows: point drafts outside the filtered support (never
    accepted: token 0 comes from the no-acceptance path), point drafts on
    p0's likeliest token, and drafts with draft probabilities leaning on
    tokens the filters remove.
    """
    setting = FILTERS[name]
    vocab = 10
    logits, (keep0, p0), (_, p1) = _law_case(setting, vocab)
    assert 1 < keep0.sum() < vocab  # the filter binds and leaves a choice
    outside = int(np.flatnonzero(~keep0)[0])
    likeliest = int(p0.argmax())
    # q0 leans on the tokens p0 makes unlikely (and the filters remove).
    q0 = torch.softmax(-logits[0] * 1.5, -1)
    sizes = {"outside": 60, "likeliest": 100, "probs": 80}
    num_rows = sum(sizes.values())
    generator = torch.Generator().manual_seed(3)
    probs_drafts = torch.multinomial(q0, sizes["probs"], replacement=True, generator=generator)

    def run(drafts, draft_probs, offset):
        rows = drafts.shape[0]
        out, num = rejection_sample(
            logits[None].expand(rows, -1, -1).contiguous().to(device),
            drafts.to(device),
            None if draft_probs is None else draft_probs.to(device),
            torch.full((rows,), 0.9, device=device),
            torch.arange(offset, offset + rows, dtype=torch.int64, device=device) * 104729 + 17,
            torch.arange(rows, dtype=torch.int64, device=device) * 3,
            **dict(zip(("top_k", "top_p", "min_p"), _filter_tensors([setting] * rows, device))),
        )
        return out.cpu(), num.cpu()

    # n-gram (point-mass) drafts, then drafts drawn from q0 with q0 given.
    point = torch.tensor([outside] * sizes["outside"] + [likeliest] * sizes["likeliest"])
    point_out, point_num = run(point[:, None], None, 0)
    q_rows = sizes["probs"]
    probs_out, probs_num = run(
        probs_drafts[:, None], q0[None, None].expand(q_rows, 1, -1).contiguous(), num_rows
    )
    out, num = torch.cat([point_out, probs_out]), torch.cat([point_num, probs_num])
    accepted = num == 2
    lo = sizes["outside"]
    assert not accepted[:lo].any()  # outside the support: never accepted
    assert _chi_square_pvalue(out[:lo, 0], p0) > P_MIN  # the no-acceptance path
    mid = lo + sizes["likeliest"]
    _assert_binomial(
        int(accepted[lo:mid].sum()), mid - lo, float(p0[likeliest]), "likeliest draft accepted"
    )
    accept_q = float(torch.minimum(p0, q0.double()).sum())
    _assert_binomial(int(accepted[mid:].sum()), num_rows - mid, accept_q, "q0 draft accepted")
    assert _chi_square_pvalue(out[:, 0], p0) > P_MIN
    second = out[accepted, 1]
    assert second.numel() >= 40
    assert _chi_square_pvalue(second, p1) > P_MIN


@pytest.mark.parametrize("with_probs", [False, True], ids=["point_drafts", "draft_probs"])
def test_drafts_outside_the_filtered_support_are_never_accepted(device, with_probs):
    num_rows, vocab = 24, 16
    generator = torch.Generator().manual_seed(23)
    logits = torch.randn(num_rows, 3, vocab, generator=generator) * 2
    temperature = torch.full((num_rows,), 1.5)
    settings = [list(FILTERS.values())[b % 4] for b in range(num_rows)]
    top_k, top_p, min_p = _filter_tensors(settings, "cpu")
    masked, _ = _masked(logits, temperature, top_k, top_p, min_p)
    # Every draft is the likeliest token its filters remove, and q puts all
    # its mass there: unfiltered, such drafts are often accepted.
    removed = masked[:, :2] == float("-inf")
    drafts = logits[:, :2].masked_fill(~removed, float("-inf")).argmax(-1)
    draft_probs = torch.nn.functional.one_hot(drafts, vocab).float() if with_probs else None
    out, num = rejection_sample(
        logits.to(device), drafts.to(device),
        None if draft_probs is None else draft_probs.to(device),
        temperature.to(device), torch.arange(num_rows, device=device),
        torch.zeros(num_rows, dtype=torch.int64, device=device),
        top_k=top_k.to(device), top_p=top_p.to(device), min_p=min_p.to(device),
    )
    assert (num.cpu() == 1).all()
    for b in range(num_rows):
        assert masked[b, 0, out[b, 0].item()] > float("-inf")
    # Without the filters the same drafts are sometimes accepted.
    _, unfiltered_num = rejection_sample(
        logits.to(device), drafts.to(device),
        None if draft_probs is None else draft_probs.to(device),
        temperature.to(device), torch.arange(num_rows, device=device),
        torch.zeros(num_rows, dtype=torch.int64, device=device),
    )
    assert (unfiltered_num.cpu() > 1).any()


def test_greedy_rows_are_not_filtered(device):
    """Greedy rows take the argmax of the raw row, whatever the filters say
    (each filter keeps the max, as in vLLM)."""
    num_rows, num_drafts, vocab = 8, 3, 32
    generator = torch.Generator().manual_seed(29)
    logits = torch.randn(num_rows, num_drafts + 1, vocab, generator=generator)
    argmax = logits.argmax(-1)
    drafts = argmax[:, :num_drafts].clone()
    drafts[1::2, 1] = (argmax[1::2, 1] + 1) % vocab  # odd rows: a mismatch at draft 1
    settings = [(1, 0.01, 1.0), (2, 1.0, 0.0), (0, 0.3, 0.0), (0, 1.0, 0.9)] * 2
    top_k, top_p, min_p = _filter_tensors(settings, device)
    args = (
        logits.to(device), drafts.to(device), None, torch.zeros(num_rows, device=device),
        torch.arange(num_rows, device=device), torch.zeros(num_rows, dtype=torch.int64, device=device),
    )
    out, num = rejection_sample(*args, top_k=top_k, top_p=top_p, min_p=min_p)
    plain, plain_num = rejection_sample(*args)
    assert torch.equal(out, plain) and torch.equal(num, plain_num)
    assert num.cpu().tolist() == [4, 2] * 4
    assert out[1, 1].item() == argmax[1, 1].item()


def test_batch_composition_and_launch_style_change_no_token(monkeypatch, device):
    num_drafts, vocab = 2, 48
    generator = torch.Generator().manual_seed(31)
    num_rows = 6
    logits = torch.randn(num_rows, num_drafts + 1, vocab, generator=generator) * 2
    drafts = logits[:, :num_drafts].argmax(-1)
    drafts[::3, 0] = 5
    draft_probs = torch.softmax(torch.randn(num_rows, num_drafts, vocab, generator=generator), -1)
    temperature = torch.tensor([1.0, 0.7, 0.0, 1.2, 0.9, 1.0])
    settings = [(4, 1.0, 0.0), (0, 0.8, 0.0), (3, 0.5, 0.5), (0, 1.0, 0.1), (8, 0.9, 0.05),
                (0, 1.0, 0.0)]
    top_k, top_p, min_p = _filter_tensors(settings, "cpu")
    seeds = torch.tensor([5, 6, 7, 8, 9, 10])
    positions = torch.tensor([0, 100, 7, 31, 2, 64])

    def run(rows):
        out, num = rejection_sample(
            *(t[rows].to(device) for t in (logits, drafts, draft_probs, temperature, seeds,
                                           positions)),
            top_k=top_k[rows].to(device), top_p=top_p[rows].to(device),
            min_p=min_p[rows].to(device),
        )
        return out.cpu(), num.cpu()

    out, num = run(list(range(num_rows)))
    order = [5, 3, 1, 4, 2, 0]
    permuted, permuted_num = run(order)
    assert torch.equal(permuted, out[order]) and torch.equal(permuted_num, num[order])
    single, single_num = run([3])
    assert torch.equal(single[0], out[3]) and single_num[0] == num[3]
    # One launch per step instead of the single launch.
    stepwise = dataclasses.replace(rejection_kernel.TUNING[False], single_launch_programs_per_sm=0)
    monkeypatch.setattr(
        "vllm_sampling_plugin.ops.rejection.functional.rejection_sample_packed",
        functools.partial(rejection_kernel.rejection_sample_packed, tuning=stepwise),
    )
    again, again_num = run(list(range(num_rows)))
    assert torch.equal(again, out) and torch.equal(again_num, num)
    assert len(set(num.tolist())) > 1


def test_filters_off_give_the_unfiltered_tokens(device):
    """top_k 0 or V, top_p 1, min_p 0: the tokens of no filters at all."""
    num_rows, vocab = 6, 24
    generator = torch.Generator().manual_seed(37)
    logits = torch.randn(num_rows, 3, vocab, generator=generator)
    drafts = torch.randint(0, vocab, (num_rows, 2), generator=generator)
    args = (
        logits.to(device), drafts.to(device), None,
        torch.full((num_rows,), 1.1, device=device),
        torch.arange(num_rows, device=device), torch.arange(num_rows, device=device) * 5,
    )
    off = _filter_tensors([(0, 1.0, 0.0), (vocab, 1.0, 0.0), (vocab + 5, 1.0, 0.0)] * 2, device)
    out, num = rejection_sample(*args, top_k=off[0], top_p=off[1], min_p=off[2])
    plain, plain_num = rejection_sample(*args)
    assert torch.equal(out, plain) and torch.equal(num, plain_num)


def test_packed_layout_with_slots_and_uneven_drafts(device):
    """The runner's layout: filters by state slot, requests with 0..K drafts,
    processed logits (apply_temperature=False) and Eagle's draft logits."""
    num_spec, vocab = 3, 32
    num_drafts = [3, 0, 1, 2]
    slots = [4, 1, 3, 0]
    generator = torch.Generator().manual_seed(41)
    temperature = torch.tensor([0.9, 1.0, 0.0, 0.7, 1.2])
    settings = [(5, 1.0, 0.0), (0, 0.7, 0.0), (0, 1.0, 0.0), (4, 0.85, 0.1), (0, 1.0, 0.15)]
    top_k, top_p, min_p = _filter_tensors(settings, "cpu")
    draft_logits = torch.randn(5, num_spec, vocab, generator=generator)
    rows, draft_column, pos, cu = [], [], [], [0]
    for r, n in enumerate(num_drafts):
        rows.append(torch.randn(n + 1, vocab, generator=generator) * 2)
        draft_column += [7] + torch.randint(0, vocab, (n,), generator=generator).tolist()
        pos += list(range(10 * r, 10 * r + n + 1))
        cu.append(cu[-1] + n + 1)
    logits = torch.cat(rows)
    slot_of_row = torch.tensor(slots).repeat_interleave(torch.tensor(num_drafts) + 1)
    # Processed logits, as the runner holds them: the temperature divided already.
    row_temperature = temperature[slot_of_row]
    processed = logits / torch.where(row_temperature > 0, row_temperature, 1.0)[:, None]
    masked, margin = _masked(
        processed[:, None], (row_temperature > 0).float(),
        top_k[slot_of_row], top_p[slot_of_row], min_p[slot_of_row],
    )
    assert margin > 1e-3

    def run(target, **filters):
        sampled, num = rejection_sample_packed(
            target.to(device),
            torch.tensor(draft_column, dtype=torch.int32, device=device),
            torch.tensor(cu, dtype=torch.int32, device=device),
            torch.tensor(slots, dtype=torch.int32, device=device),
            torch.tensor(pos, dtype=torch.int64, device=device),
            temperature.to(device),
            torch.arange(5, dtype=torch.int64, device=device) + 70,
            num_spec,
            draft_logits.to(device),
            **{name: t.to(device) for name, t in filters.items()},
        )
        return _emitted(sampled.cpu(), num.cpu())

    folded = run(processed, top_k=top_k, top_p=top_p, min_p=min_p)
    assert folded == run(masked[:, 0])
    for r, tokens in enumerate(folded):
        for j, token in enumerate(tokens):
            assert masked[cu[r] + j, 0, token] > float("-inf")


def test_bad_filter_inputs_raise_value_error(device):
    logits = torch.zeros(2, 2, 8, device=device)
    args = (
        logits, torch.zeros(2, 1, dtype=torch.int64, device=device), None,
        torch.ones(2, device=device), torch.zeros(2, dtype=torch.int64, device=device),
        torch.zeros(2, dtype=torch.int64, device=device),
    )
    cases = [
        ({"top_k": torch.ones(2, device=device)}, "top_k"),
        ({"top_k": torch.ones(3, dtype=torch.int32, device=device)}, "top_k"),
        ({"top_p": torch.zeros(2, device=device)}, "top_p"),
        ({"top_p": torch.full((2,), 1.5, device=device)}, "top_p"),
        ({"top_p": torch.ones(2, dtype=torch.float64, device=device)}, "top_p"),
        ({"min_p": torch.full((2,), -0.1, device=device)}, "min_p"),
        ({"min_p": torch.full((2,), float("nan"), device=device)}, "min_p"),
    ]
    for kwargs, name in cases:
        with pytest.raises(ValueError, match=name):
            rejection_sample(*args, **kwargs)


def _order_keys(x: np.ndarray) -> np.ndarray:
    """``select.order_key`` in NumPy: uint32 keys whose order is float32 order."""
    bits = np.where(x == 0, np.float32(0), x).astype(np.float32).view(np.int32)
    flip = (bits >> 31) | np.int32(-(2**31))
    return (bits ^ flip).view(np.uint32)


def _listed_threshold_rows(vocab: int):
    """Rows of a vocabulary of several chunks, each (logits, temperature,
    (top_k, top_p, min_p), the path that must find the threshold)."""
    generator = np.random.default_rng(61)
    peaked = lambda: generator.standard_normal(vocab).astype(np.float32) * 3  # noqa: E731
    flat = lambda: generator.standard_normal(vocab).astype(np.float32) * 0.3  # noqa: E731
    same_group = peaked()
    # The three largest logits in one group of 128: the list holds two.
    same_group[[5, 9, 77]] = same_group.max() + np.array([3.0, 2.0, 1.0], dtype=np.float32)
    tied = peaked()
    # Tokens 4th to 6th largest tied, in three groups; top_k = 5 keeps all three.
    top = np.sort(tied)[::-1]
    tied[np.argsort(tied)[::-1][3:6]] = (top[3] + top[6]) / 2
    lists, collected, exact = 1, 2, 3
    return [
        (peaked(), 0.8, (20, 1.0, 0.0), lists),
        (tied, 1.0, (5, 1.0, 0.0), lists),
        (peaked(), 1.0, (300, 1.0, 0.0), collected),  # beyond the short list
        (peaked(), 1.0, (3000, 0.99, 0.0), exact),  # beyond the wide list
        (peaked() * 1.5, 1.0, (0, 0.95, 0.0), collected),  # a wide top-p set
        (same_group, 1.0, (3, 1.0, 0.0), collected),
        (peaked() * 2, 0.9, (0, 0.8, 0.0), lists),
        (flat(), 1.0, (0, 0.9, 0.0), exact),  # the top-p set is thousands wide
        (peaked(), 1.0, (0, 0.85, 0.2), lists),  # min_p above every floor
        (flat(), 1.0, (0, 0.85, 0.3), exact),  # top-p of a min_p set reaching below the floor
        (peaked(), 0.7, (30, 0.7, 0.05), lists),
        (peaked(), 1.2, (0, 1.0, 0.1), 0),  # min_p alone: the max is enough
        (peaked(), 0.0, (5, 0.5, 0.1), 0),  # greedy
    ]


def test_thresholds_from_the_chunk_lists_equal_the_whole_row_law(device):
    """``filter_thresholds`` on a vocabulary of several chunks: the kept set
    (keys at or above the threshold) is the float64 law's on every row, rows
    the chunk lists decide and rows that need the whole-row selects alike,
    and each row takes the path its construction calls for."""
    from vllm_sampling_plugin.ops.rejection.filters import filter_thresholds

    vocab = 32768  # eight chunks of 4096 tokens, groups of 128
    rows = _listed_threshold_rows(vocab)
    logits = torch.from_numpy(np.stack([r[0] for r in rows]))
    temperature = torch.tensor([r[1] for r in rows], dtype=torch.float32)
    top_k, top_p, min_p = _filter_tensors([r[2] for r in rows], "cpu")
    num_rows = len(rows)
    paths = torch.full((num_rows,), -1, dtype=torch.int32, device=device)
    thresholds = filter_thresholds(
        logits.to(device),
        torch.arange(num_rows + 1, dtype=torch.int32, device=device),
        torch.arange(num_rows, dtype=torch.int32, device=device),
        temperature.to(device),
        top_k.to(device),
        top_p.to(device),
        min_p.to(device),
        0,
        apply_temperature=True,
        paths_out=paths,
    ).cpu().numpy().view(np.uint32)
    assert paths.cpu().tolist() == [r[3] for r in rows], paths.cpu().tolist()
    assert {1, 2, 3} <= set(paths.cpu().tolist())  # every path is exercised
    for i, (row, temp, setting, _) in enumerate(rows):
        if temp == 0:
            assert thresholds[i] == 0
            continue
        want, _, margin = _filtered(row, temp, *setting)
        # Top-k alone compares logits exactly (the tied row's cut has no
        # margin); mass sums and min_p's log need room for rounding.
        assert margin > 1e-6 or setting[1:] == (1.0, 0.0), i
        scaled = np.float32(row) / np.float32(temp)
        kept = _order_keys(scaled) >= thresholds[i]
        assert np.array_equal(kept, want), (i, int(kept.sum()), int(want.sum()))


def test_tokens_on_a_vocabulary_of_several_chunks_equal_those_of_the_masked_logits(device):
    """The whole op where the chunk lists matter (every threshold path): the
    filters folded in give, token for token, what the unfiltered kernel
    gives on the logits the float64 law masks."""
    vocab = 32768
    rows = _listed_threshold_rows(vocab)
    num_rows = len(rows)
    # Both logit rows of a request are the same row: its draft (the row's
    # argmax, which every filter keeps) is judged, then the bonus drawn.
    logits = torch.from_numpy(np.stack([r[0] for r in rows]))[:, None].expand(-1, 2, -1)
    temperature = torch.tensor([r[1] for r in rows], dtype=torch.float32)
    top_k, top_p, min_p = _filter_tensors([r[2] for r in rows], "cpu")
    masked = logits.clone()
    for i, (row, temp, setting, _) in enumerate(rows):
        if temp > 0:
            keep, _, _ = _filtered(row, temp, *setting)
            masked[i, :, ~torch.from_numpy(keep)] = float("-inf")
    drafts = logits[:, 0].argmax(-1, keepdim=True)

    def run(target, **filters):
        out, num = rejection_sample(
            target.contiguous().to(device),
            drafts.to(device),
            None,
            temperature.to(device),
            torch.arange(num_rows, device=device) * 7 + 1,
            torch.arange(num_rows, device=device) * 3,
            **{name: t.to(device) for name, t in filters.items()},
        )
        return _emitted(out.cpu(), num.cpu())

    folded = run(logits, top_k=top_k, top_p=top_p, min_p=min_p)
    assert folded == run(masked)
    assert folded != run(logits)  # the filters bind somewhere
