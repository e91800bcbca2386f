"""Selection helpers of the fused top-k/top-p sampler (``ops/topk_topp``).

Thresholds are compared on *order keys*: a float32 logit ``x`` maps to a
uint32 whose unsigned order is the order of the floats, so "the k-th largest
logit" becomes an exact radix select on integers, whatever the spacing of
the values. NaN is read as -inf and -0.0 gets the key of +0.0, so values
that compare equal as floats have equal keys: ties at a threshold are
decided once, for all of them.

Which tokens a chunk lists is decided more cheaply: one small histogram of
the distance below the chunk's max (``distance_bucket``). Any choice is
exact as long as the *floor*, the largest value left out, is computed
exactly: every token above it is then listed.

Key 0 is below every real key (the key of -inf is ``NEG_INF_KEY``), so a
threshold of 0 keeps everything.
"""

import triton
import triton.language as tl

from ..random import (
    FP32_MURMUR3,
    FP64_PHILOX,
    _bits_to_uniform_fp32,
    gumbel_fp32_from_uniform,
    gumbel_fp32_murmur3,
    gumbel_fp64,
    noise_words_fp32,
)

# order_key(-inf): 0xFF800000 with every bit flipped.
NEG_INF_KEY = tl.constexpr(0x007FFFFF)
# The exact path's radix select works on 8-bit digits: four passes resolve a
# 32-bit key. The kernels spell the bin count as the literal 256.
RADIX_BINS = 256


@triton.jit
def order_key(x):
    """uint32 key of float32 ``x`` (no NaN): unsigned key order = float order.

    -0.0 is first made +0.0 so that the two zeros share a key. Then
    non-negative floats get their sign bit set; negative floats get all bits
    flipped, which reverses their order and puts them below the positives.
    """
    bits = tl.where(x == 0.0, 0.0, x).to(tl.int32, bitcast=True)
    flip = (bits >> 31) | -2147483648
    return (bits ^ flip).to(tl.uint32, bitcast=True)


@triton.jit
def radix_digit(keys, active, prefix, SHIFT: tl.constexpr):
    """The 8-bit digit of ``keys`` at ``SHIFT`` and the keys still in the race.

    A key stays active while its bits above the digit equal ``prefix``'s
    (those bits were fixed by the earlier rounds).
    """
    digit = ((keys >> SHIFT) & 0xFF).to(tl.int32)
    if SHIFT < 24:
        active = active & ((keys >> (SHIFT + 8)) == (prefix >> (SHIFT + 8)))
    return digit, active


@triton.jit
def pick_digit(hist, need):
    """Largest digit ``d`` whose weight at or above it reaches ``need``.

    ``hist`` is the weight (count or mass) of the active keys per digit.
    Returns ``d`` and the weight strictly above it, which the next round
    no longer has to find.
    """
    at_or_above = tl.cumsum(hist, axis=0, reverse=True)
    digit = tl.max(tl.where(at_or_above >= need, tl.arange(0, 256), -1), axis=0)
    # at_or_above falls with the digit: its largest value below ``need``
    # is the weight of the digits above ``digit``.
    above = tl.max(tl.where(at_or_above < need, at_or_above, 0), axis=0)
    return digit, above


@triton.jit
def distance_bucket(x, top, scale, NUM_BUCKETS: tl.constexpr):
    """Bucket ``floor((top - x) * scale)`` of each value, within
    ``[0, NUM_BUCKETS)``: the histogram must count every value.

    ``top`` is the largest of the values: it and its ties land in bucket 0,
    -inf and anything the scale cannot place (inf * 0, NaN) in the last. A
    negative product (a scale below 0 from rounding) lands in bucket 0.
    """
    scaled = (top - x) * scale
    last: tl.constexpr = NUM_BUCKETS - 1
    scaled = tl.where(scaled < last, scaled, last)
    bucket = tl.where(scaled > 0.0, scaled, 0.0).to(tl.int32)
    return tl.where(x == top, 0, bucket)


@triton.jit
def buckets_within(hist, capacity):
    """How many leading buckets hold at most ``capacity`` values together."""
    return tl.sum((tl.cumsum(hist, axis=0) <= capacity).to(tl.int32), axis=0)


@triton.jit
def largest_key_reaching(keys, weights, target):
    """Largest key ``t`` with ``sum(weights[keys >= t]) >= target``; 0 if none.

    A bit-by-bit search over the 32 key bits on a block in registers: 32
    reductions, in a fixed order, so the answer is deterministic.
    """
    threshold = tl.full((), 0, tl.uint32)
    step = tl.full((), 0x80000000, tl.uint32)
    for _ in range(32):
        trial = threshold | step
        reached = tl.sum(tl.where(keys >= trial, weights, 0), axis=0) >= target
        threshold = tl.where(reached, trial, threshold)
        step = step >> 1
    return threshold


@triton.jit
def gumbel_at(key, token_ids, NOISE: tl.constexpr):
    """Gumbel noise of arbitrary ``token_ids``: the values ``gumbel_block`` gives them.

    FP32 noise of token ``t`` is word ``t % 4`` of ``noise_words_fp32(key, t // 4)``
    (``random.gumbel_fp32_block``); FP64 and FP32 murmur3 noise are per token
    already.
    """
    if NOISE >= FP64_PHILOX:
        return gumbel_fp64(key, token_ids, NOISE)
    elif NOISE == FP32_MURMUR3:
        return gumbel_fp32_murmur3(key, token_ids)
    else:
        w0, w1, w2, w3 = noise_words_fp32(key, token_ids // 4)
        word = token_ids % 4
        bits = tl.where(word == 0, w0, tl.where(word == 1, w1, tl.where(word == 2, w2, w3)))
        return gumbel_fp32_from_uniform(_bits_to_uniform_fp32(bits))


@triton.jit
def load_logits_block(
    row_logits,  # ([vocab] logits of one row, column stride, temperature, vocab_size)
    start,
    ROWS: tl.constexpr,
    COLS: tl.constexpr,
    APPLY_TEMPERATURE: tl.constexpr,
):
    """Tokens ``start .. start + ROWS * COLS - 1`` as float32 logits, NaN made
    -inf, shaped ``[ROWS, COLS]`` (``[COLS]`` when ``ROWS`` is 1).

    Divided by the temperature (fp32 ``/``, as the Gumbel kernel does) when
    ``APPLY_TEMPERATURE`` and the temperature is not 0; tokens past the
    vocabulary read as -inf and are flagged in ``in_vocab``.
    """
    logits_row_ptr, col_stride, temperature, vocab_size = row_logits
    if ROWS == 1:
        token_ids = start + tl.arange(0, COLS)
    else:
        token_ids = start + tl.arange(0, ROWS)[:, None] * COLS + tl.arange(0, COLS)[None, :]
    in_vocab = token_ids < vocab_size
    x = tl.load(
        logits_row_ptr + token_ids * col_stride, mask=in_vocab, other=float("-inf")
    ).to(tl.float32)
    if APPLY_TEMPERATURE:
        x = x / tl.where(temperature == 0.0, 1.0, temperature)
    # NaN is the one value unequal to itself.
    return token_ids, in_vocab, tl.where(x != x, float("-inf"), x)  # noqa: PLR0124
