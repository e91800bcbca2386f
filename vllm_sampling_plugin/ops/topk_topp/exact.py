"""The exact whole-row path of the fused top-k/top-p sampler.

``ops/topk_topp`` decides nearly every row from the chunks' lists, or from
one walk that collects the row's tokens above a bound. A row that neither can
hold (top_k in the thousands, top-p alone on a flat distribution) is
finished here by its one program, walking the row several times:

* top-k: radix select of the k-th largest key, four passes of 8-bit digits
  counted with ``tl.histogram``;
* top-p: the same select weighted by probability mass, four more passes;
* the draw: one pass of Gumbel-max over the tokens at or above the threshold.

The mass of a token is ``exp(x - max)`` rounded down to a multiple of
``2**-40`` and summed in int64 by atomics into a 256-bin scratch histogram:
integer sums do not depend on the order of the atomics, so this path is as
deterministic as the rest. The rounding moves the top-p boundary by at most
``vocab * 2**-40`` of the top token's mass; ``vocab_size`` is capped at
``2**22`` so that the sums fit in int64.
"""

import triton
import triton.language as tl

from ..random import FP64_PHILOX, gumbel_block
from .select import (
    load_logits_block,
    order_key,
    pick_digit,
    radix_digit,
)

MASS_SCALE = tl.constexpr(1099511627776.0)  # 2**40
MAX_VOCAB_SIZE = 1 << 22


@triton.jit
def kth_largest_key_of_row(
    row_logits,  # ([vocab] logits of one row, column stride, temperature, vocab_size)
    rank,
    BLOCK: tl.constexpr,
    APPLY_TEMPERATURE: tl.constexpr,
):
    """The ``rank``-th largest key of the row: one pass per 8-bit digit."""
    vocab_size = row_logits[3]
    prefix = tl.full((), 0, tl.uint32)
    need = rank
    for r in tl.static_range(4):
        hist = tl.zeros([256], dtype=tl.int32)
        for start in range(0, vocab_size, BLOCK):
            _, in_vocab, x = load_logits_block(row_logits, start, 1, BLOCK, APPLY_TEMPERATURE)
            digit, active = radix_digit(order_key(x), in_vocab, prefix, 24 - 8 * r)
            hist += tl.histogram(digit, 256, mask=active)
        best, above = pick_digit(hist, need)
        need -= above
        prefix = prefix | (best.to(tl.uint32) << (24 - 8 * r))
    return prefix


@triton.jit
def top_p_key_of_row(
    row_logits,  # ([vocab] logits of one row, column stride, temperature, vocab_size)
    row_max,
    top_k_key,
    top_p,
    mass_hist_ptr,  # [256] int64 scratch of this row
    BLOCK: tl.constexpr,
    APPLY_TEMPERATURE: tl.constexpr,
):
    """Largest key ``t`` whose tokens at or above it (within the top-k set,
    keys >= ``top_k_key``) hold at least ``top_p`` of the set's mass."""
    vocab_size = row_logits[3]
    bins = tl.arange(0, 256)
    prefix = tl.full((), 0, tl.uint32)
    for r in tl.static_range(4):
        tl.store(mass_hist_ptr + bins, tl.zeros([256], dtype=tl.int64))
        tl.debug_barrier()
        for start in range(0, vocab_size, BLOCK):
            _, in_vocab, x = load_logits_block(row_logits, start, 1, BLOCK, APPLY_TEMPERATURE)
            keys = order_key(x)
            digit, active = radix_digit(
                keys, in_vocab & (keys >= top_k_key), prefix, 24 - 8 * r
            )
            mass = (tl.exp(x - row_max) * MASS_SCALE).to(tl.int64)
            tl.atomic_add(
                mass_hist_ptr + digit, mass, mask=active & (mass > 0), sem="relaxed"
            )
        tl.debug_barrier()
        # Volatile: the atomics went to L2; a cached copy of the bins is stale.
        hist = tl.load(mass_hist_ptr + bins, volatile=True)
        tl.debug_barrier()
        if r == 0:
            # In whole mass units: sum >= p * total  <=>  sum >= ceil(p * total).
            need = tl.ceil(top_p.to(tl.float64) * tl.sum(hist, axis=0).to(tl.float64))
            need = need.to(tl.int64)
        best, above = pick_digit(hist, need)
        need -= above
        prefix = prefix | (best.to(tl.uint32) << (24 - 8 * r))
    return prefix


@triton.jit
def _gumbel_argmax_of_row(
    row_logits,  # ([vocab] logits of one row, column stride, temperature, vocab_size)
    threshold,
    key,
    BLOCK: tl.constexpr,
    APPLY_TEMPERATURE: tl.constexpr,
    NOISE: tl.constexpr,
):
    """Gumbel-max over the tokens whose key is at least ``threshold``.

    A lane's best is replaced only by a strictly greater score, so among
    equal scores the lowest token id wins, as in the Gumbel kernel.
    """
    vocab_size = row_logits[3]
    score_dtype: tl.constexpr = tl.float64 if NOISE >= FP64_PHILOX else tl.float32
    best = tl.full([BLOCK], float("-inf"), score_dtype)
    best_ids = tl.arange(0, BLOCK)
    for start in range(0, vocab_size, BLOCK):
        token_ids, in_vocab, x = load_logits_block(row_logits, start, 1, BLOCK, APPLY_TEMPERATURE)
        survive = in_vocab & (order_key(x) >= threshold)
        noise = gumbel_block(key, start, BLOCK, NOISE)
        score = tl.where(survive, x.to(score_dtype) + noise, float("-inf"))
        wins = score > best
        best = tl.where(wins, score, best)
        best_ids = tl.where(wins, token_ids, best_ids)
    top = tl.max(best, axis=0)
    return tl.min(tl.where(best == top, best_ids, vocab_size), axis=0)


@triton.jit
def sample_row_exactly(
    row_logits,  # ([vocab] logits of one row, column stride, temperature, vocab_size)
    row_max,
    filters,  # (filter_k, top_k, filter_p, top_p): each filter, whether on and its value
    mass_hist_ptr,  # [256] int64 scratch of this row
    key,
    BLOCK: tl.constexpr,
    APPLY_TEMPERATURE: tl.constexpr,
    NOISE: tl.constexpr,
):
    """Top-k, then top-p, then Gumbel-max, each by walking the whole row.

    ``row_max`` is the row's largest (canonical, temperature-divided) logit
    and must be finite; the row's temperature must not be 0.
    """
    filter_k, top_k, filter_p, top_p = filters
    top_k_key = tl.full((), 0, tl.uint32)
    if filter_k:
        top_k_key = kth_largest_key_of_row(row_logits, top_k, BLOCK, APPLY_TEMPERATURE)
    top_p_key = tl.full((), 0, tl.uint32)
    if filter_p:
        top_p_key = top_p_key_of_row(
            row_logits, row_max, top_k_key, top_p, mass_hist_ptr, BLOCK, APPLY_TEMPERATURE
        )
    # The top token always stays, even for top_p <= 0.
    threshold = tl.minimum(tl.maximum(top_k_key, top_p_key), order_key(row_max))
    return _gumbel_argmax_of_row(
        row_logits, threshold, key, BLOCK, APPLY_TEMPERATURE, NOISE
    )
