"""The fused top-k/top-p sampler (``ops/topk_topp.py``).

Its token must be the Gumbel-max draw, with the documented noise, over the
tokens top-k and top-p keep: the NumPy model of ``topk_topp_reference.py``,
which uses neither the plugin's mask nor its kernels. Most tests check exactly
that; the chi-square tests check the resulting distribution against one
computed here in float64.

Three launch shapes run everywhere: the default one, ``SMALL``, whose tiny
chunks, groups and lists force the multi-chunk merge, the cut of the short
list, the walk that collects a row from a bound up (the short list cannot
decide), and, when even that does not fit (large k, flat top-p rows), the
exact whole-row path, and ``SMALL_SPLIT``, which merges the rows in a
second kernel instead of in the chunk kernel.
"""

import dataclasses
import math

import numpy as np
import pytest
import torch
from scipy import stats

from tests.conftest import DEVICE
from tests.ops.noises import NOISES
from tests.ops.topk_topp_reference import reference_top_k_top_p
from vllm_sampling_plugin.ops.topk_topp import TopKTopPTuning, top_k_top_p_sample

# Values of ``paths_out``: which step of the merge decided a row.
PATH_NO_FILTER, PATH_SHORT_LIST, PATH_COLLECTED, PATH_EXACT = range(4)

SMALL = TopKTopPTuning(
    chunk=64, group=8, short_list=16, wide_list=64, num_warps=2, row_block=64
)
# SMALL with the merge in a second kernel (SMALL's launches fit one wave:
# the chunk kernel merges its rows).
SMALL_SPLIT = dataclasses.replace(SMALL, fused_max_programs=0)
DEFAULT = TopKTopPTuning()
TUNINGS = {"default": DEFAULT, "small": SMALL, "small_split": SMALL_SPLIT}

# A chi-square test fails below this p-value. The draws are seeded, so each
# test is deterministic; a correct sampler fails one of these five tests with
# probability about 5e-3. A draw outside the kept set fails outright; wrong
# weights within it (biased noise, a wrong temperature) give p-values far
# below 1e-3 at 200-300 draws.
MIN_P_VALUE = 1e-3


def run(logits, temperature, top_k, top_p, seeds, pos, *, idx_mapping=None,
        tuning=DEFAULT, use_fp64=False, fp64_stream="philox", fp32_stream="philox",
        apply_temperature=True, paths_out=None):
    """One request slot per row unless ``idx_mapping`` says otherwise."""
    device = logits.device
    if idx_mapping is None:
        idx_mapping = torch.arange(logits.shape[0], dtype=torch.int32)
    return top_k_top_p_sample(
        logits,
        idx_mapping.to(device),
        torch.as_tensor(temperature, dtype=torch.float32).to(device),
        torch.as_tensor(seeds, dtype=torch.int64).to(device),
        torch.as_tensor(pos, dtype=torch.int64).to(device),
        torch.as_tensor(top_k, dtype=torch.int32).to(device),
        torch.as_tensor(top_p, dtype=torch.float32).to(device),
        apply_temperature=apply_temperature,
        use_fp64=use_fp64,
        fp64_stream=fp64_stream,
        fp32_stream=fp32_stream,
        tuning=tuning,
        paths_out=paths_out,
    )


def independent_reference(logits, temperature, top_k, top_p, seeds, pos, **kwargs):
    """The NumPy model's tokens (``topk_topp_reference.py``), for inputs whose
    top-p cuts lie well clear of float32 rounding."""
    tokens, margin = reference_top_k_top_p(
        logits, temperature, top_k, top_p, seeds, pos, **kwargs
    )
    assert margin > 1e-5, f"a top-p cut within {margin:.1e} of a token: pick other inputs"
    return tokens


def exact_probabilities(logits_row, top_k, top_p):
    """Float64 model of the documented semantics, written independently."""
    x = np.where(np.isnan(logits_row), -np.inf, np.asarray(logits_row, dtype=np.float64))
    vocab_size = x.shape[0]
    keep = np.ones(vocab_size, dtype=bool)
    if 0 < top_k < vocab_size:
        keep &= x >= np.sort(x)[::-1][top_k - 1]
    mass = np.where(keep, np.exp(x - x.max()), 0.0)
    if top_p < 1:
        mass_above = np.array([mass[x > v].sum() for v in x])
        keep &= (mass_above < top_p * mass.sum()) | (x == x.max())
        mass = np.where(keep, mass, 0.0)
    return mass / mass.sum()


def random_rows(num_rows, vocab_size, seed):
    """Normal rows, flat rows (large top-p sets), rows of many ties, and rows
    with only ten finite logits (as after min-p or allowed-token masking)."""
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(num_rows, vocab_size, generator=gen) * 2.5
    logits[1::4] *= 0.05
    logits[2::4] = torch.round(logits[2::4] * 2) / 2
    logits[3::4, 10:] = float("-inf")
    return logits


# Rows of (temperature, top_k, top_p): every filter combination, greedy rows,
# unfiltered rows and top_k values above the SMALL short list (16).
MIXED_ROWS = [
    (1.0, 5, 1.0), (0.7, 50, 0.9), (1.0, 0, 0.8), (1.3, 301, 0.95),
    (1.0, 1, 1.0), (0.0, 10, 0.5), (1.0, 0, 1.0), (0.5, 20, 1.0),
    (2.0, 40, 0.5), (1.0, 3, 0.3), (1.0, 301, 0.999), (0.9, 100, 0.99),
]


@NOISES
@pytest.mark.parametrize("tuning", TUNINGS.values(), ids=TUNINGS.keys())
def test_matches_independent_reference(device, tuning, noise):
    vocab_size = 301
    temperature, top_k, top_p = map(list, zip(*MIXED_ROWS))
    num_rows = len(MIXED_ROWS)
    logits = random_rows(num_rows, vocab_size, seed=1).to(device)
    seeds = [7 * i - 20 for i in range(num_rows)]
    pos = [1000 + i for i in range(num_rows)]
    paths = torch.empty(num_rows, dtype=torch.int32, device=device)
    got = run(logits, temperature, top_k, top_p, seeds, pos, tuning=tuning,
              paths_out=paths, **noise)
    want = independent_reference(logits, temperature, top_k, top_p, seeds, pos, **noise)
    assert got.dtype == torch.int64
    assert got.tolist() == want
    # Greedy and unfiltered rows (5, 6) need no filtering; with SMALL's tiny
    # lists every step of the merge decides some row.
    assert paths[5] == PATH_NO_FILTER and paths[6] == PATH_NO_FILTER
    if tuning is not DEFAULT:
        assert {PATH_SHORT_LIST, PATH_COLLECTED, PATH_EXACT} <= set(paths.tolist())


def test_cut_tokens_are_drawn_as_the_model_draws_them(device):
    """Rows whose last kept token is likely, at three temperatures and many
    seeds: top_p halfway through the second token's mass (it crosses p) or
    top_k = 2. The draws equal the model's, which draws that second token; a
    cut one token off on either side changes some of the draws."""
    seeds_per_case = 12
    cases = []
    for temp in (0.7, 1.0, 1.5):
        probs = np.sort(exact_probabilities(np.array(LOGITS_12) / temp, 0, 1.0))[::-1]
        cases += [(temp, 0, float(probs[0] + probs[1] / 2)), (temp, 2, 1.0)]
    temperature, top_k, top_p = (
        [value for value in column for _ in range(seeds_per_case)] for column in zip(*cases)
    )
    num_rows = len(temperature)
    logits = torch.tensor([LOGITS_12]).expand(num_rows, -1).contiguous().to(device)
    seeds = [31 * row + 5 for row in range(num_rows)]
    pos = [row % seeds_per_case for row in range(num_rows)]
    got = run(logits, temperature, top_k, top_p, seeds, pos)
    want = independent_reference(logits, temperature, top_k, top_p, seeds, pos)
    assert got.tolist() == want
    second = int(np.argsort(LOGITS_12)[-2])
    for case in range(len(cases)):
        drawn = want[case * seeds_per_case : (case + 1) * seeds_per_case]
        assert second in drawn and set(drawn) <= {second, int(np.argmax(LOGITS_12))}


def test_paths_report_the_deciding_step(device):
    """Crafted rows land on the step documented for them."""
    vocab_size = 600  # above the default short list: two chunks of 512
    gen = torch.Generator().manual_seed(7)
    logits = torch.randn(vocab_size, generator=gen).repeat(3, 1)
    # Row 0: top_k = 3 of a random row: the short list decides.
    # Row 1: the top five tokens in one group of 128: the lists keep two of
    # them, so top_k = 3 needs the walk that collects the row from a bound.
    logits[1, 64:69] = torch.tensor([9.0, 8.5, 8.0, 7.5, 7.0])
    # Row 2: top_k = 500 with a wide list of 256 lanes: the exact path.
    tuning = TopKTopPTuning(wide_list=256)
    paths = torch.empty(3, dtype=torch.int32, device=device)
    got = run(logits.to(device), [1.0] * 3, [3, 3, 500], [1.0] * 3, [1, 2, 3], [0, 0, 0],
              tuning=tuning, paths_out=paths)
    assert paths.tolist() == [PATH_SHORT_LIST, PATH_COLLECTED, PATH_EXACT]
    want = independent_reference(logits, [1.0] * 3, [3, 3, 500], [1.0] * 3,
                                 [1, 2, 3], [0, 0, 0])
    assert got.tolist() == want


def test_idx_mapping_reads_request_slots(device):
    """Rows read temperature/seed/top-k/top-p from their slot, not their index."""
    vocab_size = 130
    logits = random_rows(4, vocab_size, seed=2).to(device)
    idx_mapping = torch.tensor([4, 1, 4, 0], dtype=torch.int32)
    temperature = [1.0, 0.8, 9.0, 9.0, 1.2, 9.0]
    top_k = [3, 0, 1, 1, 10, 1]
    top_p = [1.0, 0.7, 0.01, 0.01, 0.9, 0.01]
    seeds = [11, 12, 0, 0, 15, 0]
    pos = [5, 6, 5, 8]
    got = run(logits, temperature, top_k, top_p, seeds, pos, idx_mapping=idx_mapping,
              tuning=SMALL)
    slots = idx_mapping.long()
    want = independent_reference(
        logits,
        torch.tensor(temperature)[slots],
        torch.tensor(top_k)[slots],
        torch.tensor(top_p)[slots],
        torch.tensor(seeds)[slots],
        pos,
    )
    assert got.tolist() == want


def test_apply_temperature_false_takes_divided_logits(device):
    vocab_size = 200
    logits = random_rows(4, vocab_size, seed=3).to(device)
    temperature = [0.6, 1.7, 0.0, 1.0]
    args = ([20, 0, 5, 7], [0.9, 0.8, 1.0, 0.5], [1, 2, 3, 4], [9, 9, 9, 9])
    divided = logits / torch.tensor([0.6, 1.7, 1.0, 1.0]).unsqueeze(-1).to(device)
    by_kernel = run(logits, temperature, *args, tuning=SMALL)
    pre_divided = run(divided, temperature, *args, tuning=SMALL, apply_temperature=False)
    assert by_kernel.tolist() == pre_divided.tolist()


# (name, logits, temperature, top_k, top_p, use_fp64, draws); the kept sets
# have 2 to 9 tokens. These few hundred draws catch a token drawn outside the
# kept set and gross errors of weight; that the law holds to within 10% of
# the temperature and one token of the cut, at 99% power, is shown on the
# NumPy model (test_references.py), which this kernel equals token for token.
LOGITS_12 = [3.0, 2.5, 2.0, 1.9, 1.0, 0.5, 0.0, -1.0, 2.2, 1.5, -3.0, 0.8]
FALLING_12 = [1.0, 0.8, 0.5, 0.3, 0.0, -0.5, -1.0, -2.0, -4.0, -6.0, -7.0, -9.0]
DISTRIBUTIONS = [
    ("top_k", LOGITS_12, 0.7, 5, 1.0, False, 200),
    ("top_p", LOGITS_12, 1.5, 0, 0.8, False, 200),
    ("top_k_top_p", LOGITS_12, 1.0, 6, 0.85, False, 300),
    ("top_k_top_p_fp64", LOGITS_12, 0.6, 6, 0.85, True, 200),
    ("top_p_near_1", FALLING_12, 1.3, 0, 0.995, False, 200),
]


@pytest.mark.parametrize(
    "name, logits_row, temperature, top_k, top_p, use_fp64, draws",
    DISTRIBUTIONS,
    ids=[d[0] for d in DISTRIBUTIONS],
)
def test_distribution_chi_square(
    device, name, logits_row, temperature, top_k, top_p, use_fp64, draws
):
    """``draws`` positions of one request: counts match the exact distribution."""
    scaled = np.float32(logits_row) / np.float32(temperature)  # as the kernel divides
    probs = exact_probabilities(scaled, top_k, top_p)
    logits = torch.tensor([logits_row], device=DEVICE).expand(draws, -1).contiguous().to(device)
    tokens = run(
        logits,
        [temperature],
        [top_k],
        [top_p],
        [1234],
        torch.arange(draws),
        idx_mapping=torch.zeros(draws, dtype=torch.int32),
        use_fp64=use_fp64,
    )
    counts = np.bincount(tokens.cpu().numpy(), minlength=len(logits_row))
    support = probs > 0
    assert counts[~support].sum() == 0, f"{name}: drew filtered tokens {counts}"
    expected = probs[support] * draws
    # Pool the rarest outcomes so that every expected count is at least 5.
    order = np.argsort(expected)
    observed, pooled_expected = counts[support][order], expected[order]
    while len(pooled_expected) > 2 and pooled_expected[0] < 5:
        pooled_expected = np.concatenate([[pooled_expected[:2].sum()], pooled_expected[2:]])
        observed = np.concatenate([[observed[:2].sum()], observed[2:]])
    p_value = stats.chisquare(observed, pooled_expected).pvalue
    assert p_value > MIN_P_VALUE, f"{name}: counts {counts}, probs {probs}"


@pytest.mark.parametrize(
    "top_k, top_p", [(1, 1.0), (0, 1e-6), (1, 1e-6)], ids=["k1", "p_near_0", "both"]
)
def test_single_survivor_is_always_drawn(device, top_k, top_p):
    logits_row = [0.5, 2.0, 1.99, -1.0, 2.0 - 1e-3, 0.0]
    draws = 40
    tokens = run(
        torch.tensor([logits_row]).expand(draws, -1).contiguous().to(device),
        [1.5], [top_k], [top_p], [99], torch.arange(draws),
        idx_mapping=torch.zeros(draws, dtype=torch.int32),
    )
    assert set(tokens.tolist()) == {1}


def support_over_draws(logits_row, top_k, top_p, temperature, tuning, draws=30):
    logits = torch.tensor([logits_row], device=DEVICE).expand(draws, -1).contiguous()
    tokens = run(
        logits, [temperature], [top_k], [top_p], [5], torch.arange(draws),
        idx_mapping=torch.zeros(draws, dtype=torch.int32), tuning=tuning,
    )
    return set(tokens.tolist())


# In the tie tests every kept tied token has probability >= 0.2 per draw, so
# 30 draws miss one with probability below 0.8**30 ~ 1e-3 (and these seeded
# draws do not): a kernel keeping only part of a tie fails.


@pytest.mark.parametrize("tuning", TUNINGS.values(), ids=TUNINGS.keys())
def test_top_k_keeps_every_tie_at_the_kth_value(tuning):
    # The 2nd largest value, 3.0, is shared by tokens 1, 2 and 3: all stay.
    logits_row = [5.0, 3.0, 3.0, 3.0, 1.0, 1.0, 0.0, 0.0] + [-2.0] * 70
    assert support_over_draws(logits_row, 2, 1.0, 3.0, tuning) == {0, 1, 2, 3}
    # -0.0 and +0.0 are the same value: both are the 2nd largest.
    assert support_over_draws([2.0, 0.0, -0.0, -1.0, -1.0], 2, 1.0, 3.0, tuning) == {0, 1, 2}


@pytest.mark.parametrize("tuning", TUNINGS.values(), ids=TUNINGS.keys())
def test_top_p_keeps_or_drops_ties_together(tuning):
    # Probabilities 0.4, 0.2, 0.2, 0.2 (and a negligible tail). The three tied
    # tokens each have mass 0.4 strictly above them: kept together iff p > 0.4.
    tie = 1.0 + math.log(0.5)
    logits_row = [1.0, tie, tie, tie] + [-40.0] * 80
    assert support_over_draws(logits_row, 0, 0.41, 1.0, tuning) == {0, 1, 2, 3}
    assert support_over_draws(logits_row, 0, 0.39, 1.0, tuning) == {0}
    # Top-k = 2 keeps all four (the ties); top-p then sees the same boundary.
    assert support_over_draws(logits_row, 2, 0.41, 1.0, tuning) == {0, 1, 2, 3}


@NOISES
@pytest.mark.parametrize("tuning", TUNINGS.values(), ids=TUNINGS.keys())
def test_nan_and_inf_rows(device, tuning, noise):
    vocab_size = 150
    nan, inf = float("nan"), float("inf")
    clean = random_rows(2, vocab_size, seed=4)
    rows = [clean[0].clone() for _ in range(6)] + [clean[1]]
    rows[0][:] = nan  # all NaN
    rows[1][[3, 50, 149]] = nan  # a few NaNs
    rows[2][rows[2].argmax()] = nan  # NaN at the top
    rows[3][[7, 9]] = inf  # +inf: the first one wins
    rows[3][[1, 2]] = -inf
    rows[4][:] = -inf  # all -inf
    rows[5][::3] = -inf  # -inf entries only
    logits = torch.stack(rows).to(device)
    num_rows = logits.shape[0]
    args = ([1.0] * num_rows, [20] * num_rows, [0.9] * num_rows,
            list(range(num_rows)), [77] * num_rows)
    got = run(logits, *args, tuning=tuning, **noise)
    assert ((got >= 0) & (got < vocab_size)).all()
    assert got[0] == 0 and got[4] == 0 and got[3] == 7
    want = independent_reference(logits, *args, **noise)
    assert got.tolist() == want
    # The clean row's token does not depend on the broken rows beside it.
    alone = run(logits[6:], *(a[6:] for a in args), tuning=tuning, **noise)
    assert got[6] == alone[0]


@pytest.mark.parametrize("tuning", TUNINGS.values(), ids=TUNINGS.keys())
def test_batch_invariance_and_seeds(device, tuning):
    vocab_size = 200
    logits = random_rows(6, vocab_size, seed=5).to(device)
    temperature = [1.0, 0.8, 1.2, 1.0, 1.0, 1.0]
    top_k = [30, 0, 12, 25, 25, 25]
    top_p = [0.9, 0.95, 1.0, 0.97, 0.97, 0.97]
    seeds = [1, 2, 3, 40, 41, 42]
    pos = [10, 11, 12, 13, 13, 13]
    logits[3:] = logits[1]  # one flat row, three seeds
    batch = run(logits, temperature, top_k, top_p, seeds, pos, tuning=tuning)
    # Reversed order, in larger state tensors, and one row alone.
    order = torch.arange(5, -1, -1)
    slots = torch.tensor([7, 2, 5, 0, 3, 6], dtype=torch.int32)

    def scatter(values, dtype):
        state = torch.zeros(8, dtype=dtype)
        state[slots.long()] = torch.tensor(values, dtype=dtype)[order]
        return state

    reordered = run(
        logits[order], scatter(temperature, torch.float32), scatter(top_k, torch.int32),
        scatter(top_p, torch.float32), scatter(seeds, torch.int64),
        torch.tensor(pos)[order], idx_mapping=slots, tuning=tuning,
    )
    assert reordered.tolist() == batch[order].tolist()
    single = run(logits[2:3], [1.2], [12], [1.0], [3], [12], tuning=tuning)
    assert single.item() == batch[2].item()
    again = run(logits, temperature, top_k, top_p, seeds, pos, tuning=tuning)
    assert again.tolist() == batch.tolist()
    # Per-request seeds are honoured: one row, positions equal, seeds differ.
    assert len(set(batch[3:].tolist())) > 1


def test_greedy_rows_ignore_top_k_top_p(device):
    logits = torch.tensor([
        [0.0, 3.0, 1.0, 3.0, 2.0],  # tie at the max: lowest id
        [5.0, -1.0, 7.0, 7.0, 6.9],
        [float("nan"), 1.0, 2.0, 2.0, float("-inf")],
    ]).to(device)
    got = run(logits, [0.0] * 3, [1, 2, 0], [0.1, 1.0, 0.2], [1, 2, 3], [4, 4, 4])
    assert got.tolist() == [1, 2, 2]


def test_bad_input_raises_before_launch(device):
    logits = torch.zeros(2, 8, device=device)
    good = {
        "idx_mapping": torch.arange(2, dtype=torch.int32, device=device),
        "temperature": torch.ones(2, device=device),
        "seeds": torch.zeros(2, dtype=torch.int64, device=device),
        "pos": torch.zeros(2, dtype=torch.int64, device=device),
        "top_k": torch.zeros(2, dtype=torch.int32, device=device),
        "top_p": torch.ones(2, device=device),
    }

    def call(logits=logits, **changes):
        return top_k_top_p_sample(logits, **{**good, **changes}, apply_temperature=True)

    bad = [
        ("logits", {"logits": torch.zeros(8, device=device)}),
        ("logits", {"logits": torch.zeros(2, 8, dtype=torch.int32, device=device)}),
        ("idx_mapping", {"idx_mapping": torch.arange(3, dtype=torch.int32, device=device)}),
        ("pos", {"pos": torch.zeros(2, dtype=torch.int32, device=device)}),
        ("seeds", {"seeds": torch.zeros(2, dtype=torch.int32, device=device)}),
        ("top_k", {"top_k": torch.zeros(2, device=device)}),
        ("top_p", {"top_p": torch.ones(3, device=device)}),
        ("temperature", {"temperature": torch.ones(2, dtype=torch.float64, device=device)}),
    ]
    for name, change in bad:
        with pytest.raises(ValueError, match=name):
            call(**change)
    with pytest.raises(ValueError, match="tuning.group"):
        top_k_top_p_sample(logits, **good, apply_temperature=True,
                           tuning=TopKTopPTuning(chunk=64, group=64))
    assert call().shape == (2,)


@pytest.mark.gpu
@NOISES
def test_gpu_full_vocab_matches_independent_reference(noise):
    """V=151936 on the GPU: every step of the merge and every row kind.

    Logits are divided here (``apply_temperature=False``): torch's and
    Triton's fp32 division differ in the last bit on the GPU. A row whose
    top-p cut lies within float32 rounding of a token (the flat rows may)
    could go either way: only the others are compared, at least half.
    """
    vocab_size, num_rows = 151936, 64
    gen = torch.Generator().manual_seed(6)
    logits = (torch.randn(num_rows, vocab_size, generator=gen) * 3).cuda()
    logits[1::8] *= 0.02  # flat rows: top-p alone goes to the exact path
    logits[2::8] = logits[2::8].bfloat16().float()  # many ties
    rows = MIXED_ROWS * (num_rows // len(MIXED_ROWS) + 1)
    temperature, top_k, top_p = (list(c)[:num_rows] for c in zip(*rows))
    top_k = [k if k != 301 else vocab_size for k in top_k]
    top_k[5::16] = [2000] * len(top_k[5::16])  # collected from a bound
    top_k[13::16] = [5000] * len(top_k[13::16])  # beyond the wide list: exact path
    divisor = torch.tensor([t if t else 1.0 for t in temperature]).cuda().unsqueeze(-1)
    logits = logits / divisor
    seeds = torch.randint(-(2**62), 2**62, (num_rows,), generator=gen)
    pos = torch.randint(0, 2**40, (num_rows,), generator=gen)
    got = run(logits, temperature, top_k, top_p, seeds, pos,
              apply_temperature=False, **noise)
    compared = 0
    for row in range(num_rows):
        one = slice(row, row + 1)
        want, margin = reference_top_k_top_p(
            logits[one], temperature[one], top_k[one], top_p[one], seeds[one], pos[one],
            apply_temperature=False, **noise,
        )
        if margin > 1e-5:
            assert got[row].item() == want[0], row
            compared += 1
    assert compared >= num_rows // 2
