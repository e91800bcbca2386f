"""The public ``ops.sample`` API: distribution, robustness, invariance, errors."""

import importlib
import math

import pytest
import torch
from scipy import stats

from tests.ops.power import draws_for_power
from tests.ops.test_masking import kept_by_definition
from vllm_sampling_plugin.ops import sample

# A p-value below this fails a goodness-of-fit test. Seeds are fixed, so a
# correct sampler passes deterministically; the threshold only says how far
# off a counted distribution may look before we call it wrong.
CHI_SQUARE_ALPHA = 1e-3

# Small vocabulary with a tie (0.6, 0.6) and every probability >= 2.8%, so
# that even the CPU's few hundred draws per case give expected counts >= 5.
DIST_LOGITS = [1.0, 0.6, 0.6, 0.2, -0.2, -0.6]

# (temperature, top_k, top_p) per case; top_k 0 / top_p 1 mean off.
DIST_CASES = [
    (1.0, 0, 1.0),
    (0.6, 0, 1.0),
    (0.9, 2, 1.0),  # the 2nd largest is tied: 3 tokens kept
    (1.0, 0, 0.6),
    (1.3, 5, 0.8),
]


def exact_distribution(temperature: float, top_k: int, top_p: float) -> list[float]:
    scaled = [v / temperature for v in DIST_LOGITS]
    kept = kept_by_definition(scaled, top_k, top_p)
    weights = [math.exp(v) if k else 0.0 for v, k in zip(scaled, kept)]
    return [w / sum(weights) for w in weights]


# On the GPU every case gets the draws that tell its law from the law at
# 0.9 T and at 1.1 T with 99% power (power.py). The CPU's 200 draws per case
# (the interpreter takes tens of milliseconds a row) catch a token outside the
# kept set and gross errors only; the 10% law at 99% power is shown on the
# NumPy model (test_references.py), which the kernels equal token for token.
GPU_DRAWS = max(
    draws_for_power(
        exact_distribution(temp, k, p), exact_distribution(temp * error, k, p), CHI_SQUARE_ALPHA
    )
    for temp, k, p in DIST_CASES
    for error in (0.9, 1.1)
)


@pytest.mark.parametrize(
    "use_fp64, fp32_stream",
    [(False, "philox"), (False, "murmur3"), (True, "philox")],
    ids=["fp32", "fp32_murmur3", "fp64"],
)
def test_draws_fit_exact_distribution(device, use_fp64, fp32_stream):
    """Chi-square goodness of fit per case; never a token outside the kept set.

    All cases run in one launch: rows are copies of DIST_LOGITS that differ in
    seed, so each row is an independent draw. Both FP32 streams (the plugin's
    and vLLM 0.32/0.33's murmur3 noise) must draw the law.
    """
    draws = 200 if device.type == "cpu" else GPU_DRAWS
    num_cases = len(DIST_CASES)
    temperature = torch.tensor([c[0] for c in DIST_CASES]).repeat_interleave(draws)
    top_k = torch.tensor([c[1] for c in DIST_CASES]).repeat_interleave(draws)
    top_p = torch.tensor([c[2] for c in DIST_CASES]).repeat_interleave(draws)
    batch_size = num_cases * draws
    tokens = sample(
        torch.tensor(DIST_LOGITS).expand(batch_size, -1).to(device),
        temperature.to(device),
        torch.arange(batch_size, device=device) * 7919 + 11,
        torch.full((batch_size,), 3, device=device),
        top_k.to(device),
        top_p.to(device),
        use_fp64=use_fp64,
        fp32_stream=fp32_stream,
    ).cpu()

    for case, (temp, k, p) in enumerate(DIST_CASES):
        counts = torch.bincount(tokens[case * draws : (case + 1) * draws], minlength=6)
        expected = exact_distribution(temp, k, p)
        support = [j for j, q in enumerate(expected) if q > 0]
        outside = [j for j, q in enumerate(expected) if q == 0]
        assert counts[outside].sum() == 0, (DIST_CASES[case], counts.tolist())
        observed = counts[support].double().numpy()
        fit = stats.chisquare(observed, [expected[j] * draws for j in support])
        assert fit.pvalue > CHI_SQUARE_ALPHA, (DIST_CASES[case], counts.tolist(), fit)


@pytest.mark.gpu
def test_chi_square_rejects_a_wrong_temperature():
    """The GPU-sized fit has the power to see temperature 0.6 vs 1.0."""
    draws = 40_000
    tokens = sample(
        torch.tensor(DIST_LOGITS, device="cuda").expand(draws, -1),
        torch.full((draws,), 0.6, device="cuda"),
        torch.arange(draws, device="cuda"),
        torch.zeros(draws, dtype=torch.int64, device="cuda"),
    ).cpu()
    counts = torch.bincount(tokens, minlength=6).double().numpy()
    wrong = stats.chisquare(counts, [q * draws for q in exact_distribution(1.0, 0, 1.0)])
    assert wrong.pvalue < 1e-12


PATHS = [
    pytest.param(False, False, id="fp32"),
    pytest.param(True, False, id="fp64"),
    pytest.param(False, True, id="fp32-topk-topp"),
    pytest.param(True, True, id="fp64-topk-topp"),
]


def robustness_batch(device, masked: bool):
    gen = torch.Generator().manual_seed(5)
    batch_size, vocab_size = 8, 40
    logits = torch.randn(batch_size, vocab_size, generator=gen) * 2
    kwargs = dict(
        temperature=torch.tensor([0.8, 1.0, 0.5, 0.0, 1.2, 0.9, 0.7, 1.0]),
        seeds=torch.arange(batch_size) + 100,
        positions=torch.arange(batch_size) * 3,
    )
    if masked:
        kwargs["top_k"] = torch.tensor([5, 0, 10, 3, 20, 7, 0, 12])
        kwargs["top_p"] = torch.tensor([0.9, 0.8, 1.0, 0.5, 0.95, 0.7, 0.6, 1.0])
    return logits.to(device), {k: v.to(device) for k, v in kwargs.items()}


def corrupt(logits: torch.Tensor, variant: str, row: int) -> torch.Tensor:
    nan, inf = float("nan"), float("inf")
    logits = logits.clone()
    top = int(logits[row].argmax())
    if variant == "all_nan":
        logits[row] = nan
    elif variant == "few_nans":
        logits[row, [1, 17, 33]] = nan
    elif variant == "nan_at_top":
        logits[row, top] = nan
    elif variant == "infinities":
        logits[row, [4, 30]] = inf
        logits[row, [0, 10, 11]] = -inf
    elif variant == "all_neg_inf":
        logits[row] = -inf
    return logits


@pytest.mark.parametrize("use_fp64, masked", PATHS)
@pytest.mark.parametrize(
    "variant", ["all_nan", "few_nans", "nan_at_top", "infinities", "all_neg_inf"]
)
@pytest.mark.parametrize("row", [2, 3])  # row 3 is greedy
def test_bad_logits_stay_in_their_row(device, use_fp64, masked, variant, row):
    logits, kwargs = robustness_batch(device, masked)
    clean = sample(logits, **kwargs, use_fp64=use_fp64)
    dirty_logits = corrupt(logits, variant, row)
    dirty = sample(dirty_logits, **kwargs, use_fp64=use_fp64)

    assert ((dirty >= 0) & (dirty < logits.shape[1])).all()
    others = [i for i in range(logits.shape[0]) if i != row]
    assert torch.equal(dirty[others], clean[others])
    token = int(dirty[row])
    if variant in ("all_nan", "all_neg_inf"):
        assert token == 0
    elif variant == "infinities":
        assert token == 4  # the lowest +inf id
    else:
        assert not math.isnan(dirty_logits[row, token].item())


@pytest.mark.parametrize("use_fp64", [False, True], ids=["fp32", "fp64"])
def test_row_token_independent_of_batch(device, use_fp64):
    """Same token alone, reversed, next to other rows, with or without other
    rows using top-k / top-p."""
    logits, kwargs = robustness_batch(device, masked=True)
    # Rows 1 and 6 do not restrict (top_k 0, top_p 1 there).
    kwargs["top_p"][1] = 1.0
    kwargs["top_p"][6] = 1.0
    full = sample(logits, **kwargs, use_fp64=use_fp64)

    reverse = torch.arange(7, -1, -1, device=device)
    reversed_kwargs = {k: v[reverse] for k, v in kwargs.items()}
    assert torch.equal(sample(logits[reverse], **reversed_kwargs, use_fp64=use_fp64), full[reverse])

    for row in (0, 1, 3, 6):
        alone = {k: v[row : row + 1] for k, v in kwargs.items()}
        assert sample(logits[row : row + 1], **alone, use_fp64=use_fp64).item() == full[row].item()
    # Unrestricted rows: same token when nobody in the batch restricts.
    plain = {k: kwargs[k][[1, 6]] for k in ("temperature", "seeds", "positions")}
    assert sample(logits[[1, 6]], **plain, use_fp64=use_fp64).tolist() == full[[1, 6]].tolist()

    other_logits = logits.clone()
    other_logits[[0, 2, 4, 5, 7]] = torch.randn(5, logits.shape[1], device=device)
    changed = sample(other_logits, **kwargs, use_fp64=use_fp64)
    assert torch.equal(changed[[1, 3, 6]], full[[1, 3, 6]])


@pytest.mark.parametrize("use_fp64", [False, True], ids=["fp32", "fp64"])
def test_seed_and_position_fix_the_draw(device, use_fp64):
    batch_size = 16
    logits = torch.zeros(batch_size, 50, device=device)  # uniform: any token
    temperature = torch.ones(batch_size, device=device)
    seeds = torch.arange(batch_size, device=device) + 42
    positions = torch.full((batch_size,), 9, device=device)
    first = sample(logits, temperature, seeds, positions, use_fp64=use_fp64)
    assert torch.equal(sample(logits, temperature, seeds, positions, use_fp64=use_fp64), first)
    new_seed = sample(logits, temperature, seeds + 1000, positions, use_fp64=use_fp64)
    new_position = sample(logits, temperature, seeds, positions + 1, use_fp64=use_fp64)
    # Uniform over 50 tokens: each row repeats with probability 1/50.
    assert (new_seed != first).sum() >= 12
    assert (new_position != first).sum() >= 12


@pytest.mark.parametrize("use_fp64", [False, True], ids=["fp32", "fp64"])
def test_greedy_is_exact_argmax_even_with_top_k_top_p(device, use_fp64):
    gen = torch.Generator().manual_seed(3)
    logits = torch.randint(-3, 3, (6, 64), generator=gen).float().to(device)  # ties
    zeros = torch.zeros(6, device=device)
    seeds = torch.arange(6, device=device)
    positions = torch.arange(6, device=device)
    expected = logits.argmax(dim=-1)
    assert torch.equal(sample(logits, zeros, seeds, positions, use_fp64=use_fp64), expected)
    top_k = torch.tensor([1, 2, 0, 64, 5, 3], device=device)
    top_p = torch.tensor([0.1, 0.5, 1.0, 0.9, 0.2, 0.99], device=device)
    assert torch.equal(
        sample(logits, zeros, seeds, positions, top_k, top_p, use_fp64=use_fp64), expected
    )


def test_empty_batch(device):
    tokens = sample(
        torch.empty(0, 10, device=device),
        torch.empty(0, device=device),
        torch.empty(0, dtype=torch.int64, device=device),
        torch.empty(0, dtype=torch.int64, device=device),
    )
    assert tokens.shape == (0,) and tokens.dtype == torch.int64


def _good_args():
    return dict(
        logits=torch.zeros(3, 10),
        temperature=torch.ones(3),
        seeds=torch.zeros(3, dtype=torch.int64),
        positions=torch.zeros(3, dtype=torch.int64),
        top_k=torch.tensor([1, 2, 3]),
        top_p=torch.tensor([0.5, 1.0, 0.9]),
    )


@pytest.mark.parametrize(
    "name, value",
    [
        ("logits", torch.zeros(10)),
        ("logits", torch.zeros(3, 10, dtype=torch.int64)),
        ("logits", [[0.0] * 10] * 3),
        ("temperature", torch.ones(4)),
        ("temperature", torch.ones(3, dtype=torch.int64)),
        ("temperature", torch.tensor([1.0, -0.5, 1.0])),
        ("temperature", torch.tensor([1.0, float("nan"), 1.0])),
        ("seeds", torch.zeros(3, dtype=torch.int32)),
        ("seeds", torch.zeros(2, dtype=torch.int64)),
        ("positions", torch.zeros(3)),
        ("positions", torch.zeros(3, dtype=torch.int64, device="meta")),
        ("top_k", torch.ones(3)),
        ("top_k", torch.ones(4, dtype=torch.int64)),
        ("top_p", torch.ones(3, dtype=torch.int64)),
        ("top_p", torch.tensor([0.5, 0.0, 0.9])),
        ("top_p", torch.tensor([0.5, float("nan"), 0.9])),
        ("use_fp64", "yes"),
        ("fp64_stream", "pcg"),
    ],
)
def test_bad_input_raises_value_error_before_any_kernel(name, value, monkeypatch):
    def no_kernel(*args, **kwargs):
        raise AssertionError("a kernel was launched")

    # ``ops.sample`` is the function; the module is only in sys.modules.
    sample_module = importlib.import_module("vllm_sampling_plugin.ops.sample")
    monkeypatch.setattr(sample_module, "gumbel_sample", no_kernel)
    monkeypatch.setattr(sample_module, "top_k_top_p_sample", no_kernel)
    args = _good_args()
    args[name] = value
    with pytest.raises(ValueError, match=name):
        sample(**args)
