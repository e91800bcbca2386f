"""The random decisions of one block: accepting a draft, and the Gumbel-max winners of a
block for the corrected (residual) and the bonus token, each on its own Philox stream."""

import triton
import triton.language as tl

from ..random import FP64_PHILOX, gumbel_block, request_key, uniform
from .stats import load_logits

# Philox counters under the key of a logit; the plain Gumbel stream uses
# [0, V) (FP64) or [0, V / 4) (FP32), the residual one [2**30, 2**30 + V) or
# [2**28, 2**28 + V / 4), so the three never meet while V < 2**30 - 1.
_RESIDUAL_STREAM = tl.constexpr(1 << 30)
_ACCEPT_COUNTER = tl.constexpr((1 << 31) - 1)
MAX_VOCAB_SIZE = (1 << 30) - 1
_INT32_MAX = tl.constexpr(2**31 - 1)


@triton.jit
def lowest_best(values, tokens):
    """Max of per-lane bests, and the lowest token holding it."""
    best = tl.max(values, axis=0)
    return best, tl.min(tl.where(values == best, tokens, _INT32_MAX), axis=0)


@triton.jit
def draft_accepted(
    key,
    draft,
    row,
    temp,
    greedy_token,
    target_lse,
    draft_lse,
    target_row_ptr,  # [V]
    threshold,  # the target row's filter threshold (filters.py)
    draft_row_ptr,  # [V]
    conditional_rates_ptr,
    vocab_size,
    SYNTHETIC_MODE: tl.constexpr,
    HAS_DRAFT_LOGITS: tl.constexpr,
    NOISE: tl.constexpr,
    APPLY_TEMPERATURE: tl.constexpr,
    FILTERED: tl.constexpr,
    SCALE_DRAFT: tl.constexpr,
):
    in_vocab = (draft >= 0) & (draft < vocab_size)
    accept_counter = tl.full([], _ACCEPT_COUNTER, tl.int32)
    if SYNTHETIC_MODE:
        # The configured conditional rate decides, whatever the tokens. The
        # row work that dominates the cost (loading the target and draft rows,
        # their log-sum-exp, the residual resample) is done exactly as in
        # standard mode, so synthetic runs take the time of real runs with the
        # same acceptance; only this O(num_tiles) test differs.
        accepted = uniform(key, accept_counter, NOISE) < tl.load(conditional_rates_ptr + row)
    elif temp == 0.0:
        accepted = greedy_token == draft
    else:
        # A draft the filters drop has log p = -inf: never accepted.
        log_p = (
            load_logits(
                target_row_ptr, draft, in_vocab, temp, threshold, APPLY_TEMPERATURE, FILTERED
            )
            - target_lse
        )
        if HAS_DRAFT_LOGITS:
            log_q = (
                load_logits(draft_row_ptr, draft, in_vocab, temp, 0, SCALE_DRAFT, False)
                - draft_lse
            )
        else:
            # An n-gram draft is a point mass: q(draft) = 1.
            log_q = 0.0
        # u < min(1, p / q) in log space. A row without any finite logit gives
        # log_p = NaN, which rejects.
        accepted = log_p > tl.log(uniform(key, accept_counter, NOISE)) + log_q
    return accepted & in_vocab


@triton.jit
def corrected_block_winners(
    key,
    draft,
    temp,
    target_lse,
    draft_lse,
    target_row_ptr,  # [V]
    threshold,  # the target row's filter threshold (filters.py)
    draft_row_ptr,  # [V]
    block_start,
    block_end,
    vocab_size,
    SAMPLE_CHUNK: tl.constexpr,
    HAS_DRAFT_LOGITS: tl.constexpr,
    NOISE: tl.constexpr,
    APPLY_TEMPERATURE: tl.constexpr,
    FILTERED: tl.constexpr,
    SCALE_DRAFT: tl.constexpr,
):
    """Gumbel-max winners of one block for a rejected draft (temperature > 0).

    Returns (value, token) of the residual max(0, p - q) and of p itself; the
    latter is used only should the residual have no mass anywhere. Each lane
    keeps its best across chunks (strictly greater: the earliest token keeps
    a tie), and the lanes are reduced once at the end.
    """
    score_dtype = tl.float64 if NOISE >= FP64_PHILOX else tl.float32
    lanes = tl.arange(0, SAMPLE_CHUNK)
    best_value = tl.full([SAMPLE_CHUNK], float("-inf"), score_dtype)
    best_token = block_start + lanes
    fallback_value = tl.full([SAMPLE_CHUNK], float("-inf"), score_dtype)
    fallback_token = block_start + lanes
    draft_in_vocab = (draft >= 0) & (draft < vocab_size)
    for chunk in range(tl.cdiv(block_end - block_start, SAMPLE_CHUNK)):
        chunk_start = block_start + chunk * SAMPLE_CHUNK
        offsets = chunk_start + lanes
        mask = offsets < vocab_size
        logits = load_logits(
            target_row_ptr, offsets, mask, temp, threshold, APPLY_TEMPERATURE, FILTERED
        )
        if HAS_DRAFT_LOGITS:
            # log(p - q) = log p + log(1 - q / p) where q < p.
            log_p = logits - target_lse
            ratio = tl.exp(
                load_logits(draft_row_ptr, offsets, mask, temp, 0, SCALE_DRAFT, False)
                - draft_lse
                - log_p
            )
            has_mass = ratio < 1.0
            residual = tl.where(
                has_mass, log_p + tl.log(tl.where(has_mass, 1.0 - ratio, 1.0)), float("-inf")
            )
            # A draft id outside the vocabulary was not drawn from q: use p.
            residual = tl.where(draft_in_vocab, residual, logits)
        else:
            # A point-mass draft leaves p without the rejected token.
            residual = tl.where(offsets == draft, float("-inf"), logits)
        noise = gumbel_block(key, chunk_start + _RESIDUAL_STREAM, SAMPLE_CHUNK, NOISE)
        value = residual.to(score_dtype) + noise
        wins = value > best_value
        best_value = tl.where(wins, value, best_value)
        best_token = tl.where(wins, offsets, best_token)
        value = logits.to(score_dtype) + noise
        wins = value > fallback_value
        fallback_value = tl.where(wins, value, fallback_value)
        fallback_token = tl.where(wins, offsets, fallback_token)
    value, token = lowest_best(best_value, best_token)
    fallback, fallback_tok = lowest_best(fallback_value, fallback_token)
    return value, token, fallback, fallback_tok


@triton.jit
def bonus_block_winner(
    seed,
    pos,
    temp,
    target_row_ptr,  # [V]
    threshold,  # the row's filter threshold (filters.py)
    block_start,
    block_end,
    vocab_size,
    SAMPLE_CHUNK: tl.constexpr,
    NOISE: tl.constexpr,
    APPLY_TEMPERATURE: tl.constexpr,
    FILTERED: tl.constexpr,
):
    """Gumbel-max (argmax when greedy) winner of one block of the bonus row."""
    score_dtype = tl.float64 if NOISE >= FP64_PHILOX else tl.float32
    lanes = tl.arange(0, SAMPLE_CHUNK)
    best_value = tl.full([SAMPLE_CHUNK], float("-inf"), score_dtype)
    best_token = block_start + lanes
    key = request_key(seed, pos, NOISE)
    for chunk in range(tl.cdiv(block_end - block_start, SAMPLE_CHUNK)):
        chunk_start = block_start + chunk * SAMPLE_CHUNK
        offsets = chunk_start + lanes
        scores = load_logits(
            target_row_ptr, offsets, offsets < vocab_size, temp, threshold, APPLY_TEMPERATURE,
            FILTERED,
        ).to(score_dtype)
        if temp != 0.0:
            # The sampler's own stream at this position.
            scores += gumbel_block(key, chunk_start, SAMPLE_CHUNK, NOISE)
        wins = scores > best_value
        best_value = tl.where(wins, scores, best_value)
        best_token = tl.where(wins, offsets, best_token)
    return lowest_best(best_value, best_token)
