"""The NumPy models of the samplers draw from the documented laws, with power.

The kernels equal these models token for token on the CPU
(``test_gumbel.py``, ``test_topk_topp.py``, ``test_rejection.py``), so a
model's law is the kernel's. A model draws a row in a fraction of a
millisecond where the interpreted kernel takes tens of milliseconds, so here
CI affords the thousands of draws that tell a law from a close alternative.

Each check names its alternatives, and its number of draws is the smallest
with at least ``POWER`` to reject every one of them at the cut-off
``ALPHA`` (``power.py``: noncentral chi-square). Seeds are fixed, so every
test is deterministic; a correct law fails one check with probability
``ALPHA``. The laws are computed here in float64 from their definitions.
"""

import math

import numpy as np
import pytest
from scipy import stats

from tests.ops.gumbel_reference import reference_tokens
from tests.ops.noises import NOISES
from tests.ops.power import draws_for_power
from tests.ops.rejection_reference import reference_rejection
from tests.ops.topk_topp_reference import reference_top_k_top_p

# About thirty checks: at 1e-4 each, a correct law fails one of them with
# probability about 3e-3.
ALPHA = 1e-4
POWER = 0.99
TEMPERATURES = [0.5, 1.0, 1.5]
# "Temperature off by 10%": the law at 0.9 T and at 1.1 T.
TEMPERATURE_ERRORS = [0.9, 1.1]
# No ties and every token at least 0.4% likely at T = 0.5: no chi-square bin
# expects fewer than 5 draws.
LOGITS = np.array([0.0, -0.5, -1.0, -1.5, -2.0, -2.5])


def softmax(x: np.ndarray) -> np.ndarray:
    weights = np.exp(x - x.max())
    return weights / weights.sum()


def draws_needed(null: np.ndarray, alternatives: list[np.ndarray]) -> int:
    """Enough draws for POWER against every alternative, and for every bin of
    the chi-square test to expect at least 5."""
    at_least_5 = math.ceil(5 / null[null > 0].min())
    return max(at_least_5, *(draws_for_power(null, alt, ALPHA, POWER) for alt in alternatives))


def assert_fits(tokens, null: np.ndarray) -> None:
    """Nothing outside the support, and a chi-square p-value above ALPHA."""
    counts = np.bincount(np.asarray(tokens), minlength=null.size)
    support = null > 0
    assert counts[~support].sum() == 0, f"drew tokens of probability 0: {counts}"
    expected = null[support] * counts.sum()
    assert expected.min() >= 5, "too few draws for a chi-square test"
    p_value = stats.chisquare(counts[support], expected).pvalue
    assert p_value > ALPHA, (counts.tolist(), expected.round(1).tolist(), p_value)


def row_seeds(draws: int) -> tuple[np.ndarray, np.ndarray]:
    """A distinct seed per draw (positions vary too)."""
    return np.arange(draws, dtype=np.int64) * 7919 + 11, np.arange(draws, dtype=np.int64) % 97


@NOISES
@pytest.mark.parametrize("temperature", TEMPERATURES)
def test_gumbel_model_draws_the_tempered_softmax(temperature, noise):
    null = softmax(LOGITS / temperature)
    draws = draws_needed(
        null, [softmax(LOGITS / (temperature * error)) for error in TEMPERATURE_ERRORS]
    )
    seeds, pos = row_seeds(draws)
    tokens = reference_tokens(
        np.tile(LOGITS.astype(np.float32), (draws, 1)),
        np.arange(draws),
        np.full(draws, temperature, dtype=np.float32),
        seeds,
        pos,
        apply_temperature=True,
        **noise,
    )
    assert_fits(tokens, null)


# Twelve logits without ties, sorted so that the prefix sums below are the
# mass of the tokens strictly above each one.
LOGITS_12 = np.array([3.0, 2.5, 2.2, 2.0, 1.9, 1.5, 1.0, 0.8, 0.5, 0.0, -1.0, -3.0])


def first_tokens(num_kept: int, temperature: float) -> np.ndarray:
    """The law that keeps the ``num_kept`` largest logits."""
    return softmax(np.where(np.arange(LOGITS_12.size) < num_kept, LOGITS_12 / temperature, -np.inf))


def top_p_kept(temperature: float, top_p: float) -> int:
    """How many tokens top-p keeps: those whose mass above is below top_p."""
    probs = softmax(LOGITS_12 / temperature)
    mass_above = np.concatenate([[0.0], np.cumsum(probs)[:-1]])
    return int(np.sum(mass_above < top_p))


# (top_k, top_p): a top-p cut alone, and top-k 6 with top-p 0.9 after it.
FILTERS = [(0, 0.75), (6, 0.9)]


@pytest.mark.parametrize("temperature", TEMPERATURES)
@pytest.mark.parametrize("top_k, top_p", FILTERS, ids=["top_p", "top_k_top_p"])
def test_top_k_top_p_model_draws_the_filtered_softmax(temperature, top_k, top_p):
    """Alternatives: the cut one token off either way, the temperature off by 10%."""
    def kept(temp):
        if top_k:
            probs = softmax(LOGITS_12[:top_k] / temp)
            mass_above = np.concatenate([[0.0], np.cumsum(probs)[:-1]])
            return int(np.sum(mass_above < top_p))
        return top_p_kept(temp, top_p)

    num_kept = kept(temperature)
    null = first_tokens(num_kept, temperature)
    alternatives = [first_tokens(num_kept - 1, temperature), first_tokens(num_kept + 1, temperature)]
    alternatives += [first_tokens(kept(temperature * e), temperature * e) for e in TEMPERATURE_ERRORS]
    draws = draws_needed(null, alternatives)
    seeds, pos = row_seeds(draws)
    tokens, margin = reference_top_k_top_p(
        np.tile(LOGITS_12.astype(np.float32), (draws, 1)),
        np.full(draws, temperature, dtype=np.float32),
        np.full(draws, top_k),
        np.full(draws, top_p),
        seeds,
        pos,
    )
    assert margin > 1e-5
    assert_fits(tokens, null)


# The target's logits and a draft distribution leaning the other way: most
# drafts are rejected, so the residual max(p - q, 0) decides most tokens.
TARGET = np.array([1.0, 0.6, 0.2, -0.2, -0.6])
DRAFT = np.array([0.05, 0.10, 0.25, 0.30, 0.30])


@pytest.mark.parametrize("use_fp64", [False, True], ids=["fp32", "fp64"])
@pytest.mark.parametrize("temperature", TEMPERATURES)
def test_rejection_model_emits_the_target_law(temperature, use_fp64):
    """Token 0 follows p whatever q; draft 0 is accepted with probability
    sum(min(p, q)). Alternatives: the residual replaced by p (token 0 then
    follows min(p, q) + (1 - sum(min(p, q))) p), the temperature off by 10%
    (for both checks)."""
    p = softmax(TARGET / temperature)
    accept = np.minimum(p, DRAFT).sum()
    residual_is_p = np.minimum(p, DRAFT) + (1 - accept) * p
    tempered = [softmax(TARGET / (temperature * e)) for e in TEMPERATURE_ERRORS]

    def accept_law(target):
        rate = np.minimum(target, DRAFT).sum()
        return np.array([rate, 1 - rate])

    draws = max(
        draws_needed(p, [residual_is_p, *tempered]),
        draws_needed(accept_law(p), [accept_law(t) for t in tempered]),
    )
    generator = np.random.default_rng(7)
    drafts = generator.choice(DRAFT.size, size=(draws, 1), p=DRAFT)
    seeds, pos = row_seeds(draws)
    want = reference_rejection(
        np.tile(TARGET.astype(np.float32), (draws, 2, 1)),
        drafts,
        np.tile(DRAFT, (draws, 1, 1)),
        np.full(draws, temperature, dtype=np.float32),
        seeds,
        pos,
        use_fp64=use_fp64,
    )
    assert_fits([tokens[0] for tokens in want.tokens], p)
    accepted = sum(len(tokens) == 2 for tokens in want.tokens)
    assert_fits([0] * accepted + [1] * (draws - accepted), accept_law(p))
