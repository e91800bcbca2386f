"""Selection helpers of the fused top-k/top-p sampler (``ops/topk_topp.py``).

Thresholds are searched on *order keys*: a float32 logit ``x`` maps to a
uint32 whose unsigned order is the order of the floats, so "the k-th largest
logit" and "the smallest logit still inside the top-p set" become integer
searches that are exact, whatever the spacing of the values. Logits are first
made canonical (NaN -> -inf, -0.0 -> +0.0) so that values that compare equal
as floats have equal keys: ties at a threshold are decided once, for all of
them.

Key 0 is below every real key (the key of -inf is ``NEG_INF_KEY``), so a
threshold of 0 keeps everything.
"""

import triton.language as tl

from vllm_sampling_plugin.ops.random import (
    _bits_to_uniform_fp32,
    gumbel_fp32_from_uniform,
    gumbel_fp64,
)

# order_key(-inf): 0xFF800000 with every bit flipped.
NEG_INF_KEY = 0x007FFFFF
# Radix select works on 8-bit digits: 256 histogram bins keep tl.histogram
# cheap on the GPU, and four rounds resolve a 32-bit key. The kernels spell
# the bin count as the literal 256.
RADIX_BINS = 256


@triton.jit
def canonical_logits(x):
    """NaN -> -inf and -0.0 -> +0.0: equal floats get equal keys."""
    x = tl.where(x != x, float("-inf"), x)
    return tl.where(x == 0.0, 0.0, x)


@triton.jit
def order_key(x):
    """uint32 key of canonical float32 ``x``: unsigned key order = float order.

    Non-negative floats get their sign bit set; negative floats get all bits
    flipped, which reverses their order and puts them below the positives.
    """
    bits = x.to(tl.int32, bitcast=True)
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
    digits = tl.arange(0, 256)
    at_or_above = tl.sum(hist, axis=0) - tl.cumsum(hist, axis=0) + hist
    digit = tl.max(tl.where(at_or_above >= need, digits, -1), axis=0)
    above = tl.sum(tl.where(digits > digit, hist, 0), axis=0)
    return digit, above


@triton.jit
def kth_largest_key(keys, rank):
    """The ``rank``-th largest of ``keys`` (a block in registers), by radix select.

    ``rank`` must be at most the number of keys.
    """
    prefix = tl.full((), 0, tl.uint32)
    active = keys == keys
    need = rank
    for r in tl.static_range(4):
        digit, active = radix_digit(keys, active, prefix, 24 - 8 * r)
        hist = tl.histogram(digit, 256, mask=active)
        best, above = pick_digit(hist, need)
        need -= above
        prefix = prefix | (best.to(tl.uint32) << (24 - 8 * r))
    return prefix


@triton.jit
def largest_key_reaching(keys, weights, target):
    """Largest key ``t`` with ``sum(weights[keys >= t]) >= target``; 0 if none.

    A bit-by-bit search over the 32 key bits on a block in registers. The
    sums have a fixed order, so the answer is deterministic.
    """
    threshold = tl.full((), 0, tl.uint32)
    step = tl.full((), 2147483648, tl.uint32)
    for _ in range(32):
        trial = threshold | step
        reached = tl.sum(tl.where(keys >= trial, weights, 0), axis=0) >= target
        threshold = tl.where(reached, trial, threshold)
        step = step >> 1
    return threshold


@triton.jit
def gumbel_at(key, token_ids, USE_FP64: tl.constexpr):
    """Gumbel noise of arbitrary ``token_ids``: the values ``gumbel_block`` gives them.

    FP32 noise of token ``t`` is word ``t % 4`` of ``philox(key, t // 4)``
    (``random.gumbel_fp32_block``); FP64 noise is per token already.
    """
    if USE_FP64:
        return gumbel_fp64(key, token_ids)
    else:
        w0, w1, w2, w3 = tl.randint4x(key, token_ids // 4)
        word = token_ids % 4
        bits = tl.where(word == 0, w0, tl.where(word == 1, w1, tl.where(word == 2, w2, w3)))
        return gumbel_fp32_from_uniform(_bits_to_uniform_fp32(bits))

