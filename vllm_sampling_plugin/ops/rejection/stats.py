"""Per-tile row statistics (max, first argmax, fixed-point sum of exponentials) and the row
log-sum-exp and argmax rebuilt from them, the same bits whatever the launch plan."""

import triton
import triton.language as tl

from ..topk_topp.select import order_key

_FLOAT32_MAX = tl.constexpr(3.4028234663852886e38)


@triton.jit
def load_logits(
    row_ptr,
    offsets,
    mask,
    temp,
    threshold,
    APPLY_TEMPERATURE: tl.constexpr,
    FILTERED: tl.constexpr,
):
    """Logits as the kernels see them: float32, divided by ``temp`` when
    ``APPLY_TEMPERATURE``, NaN as -inf, +inf as the largest float; with
    ``FILTERED``, -inf where the order key is below ``threshold``, the row's
    top-k/top-p/min_p threshold (``filters.py``)."""
    logits = tl.load(row_ptr + offsets, mask=mask, other=float("-inf")).to(tl.float32)
    if APPLY_TEMPERATURE:
        # Division, not a reciprocal multiply: bit-identical to vLLM's temperature kernel.
        logits = logits / tl.where(temp == 0.0, 1.0, temp)
    # NaN never wins (it counts as -inf) and +inf becomes the largest finite
    # float, so log-sum-exp, log-probabilities and noisy scores stay NaN-free.
    logits = tl.where(logits == logits, tl.minimum(logits, _FLOAT32_MAX), float("-inf"))
    if FILTERED:
        logits = tl.where(order_key(logits) >= threshold, logits, float("-inf"))
    return logits


@triton.jit
def block_stats(
    row_ptr,  # [V]
    max_ptr,  # [num_tiles] of this row
    argmax_ptr,  # [num_tiles] of this row
    sumexp_ptr,  # [num_tiles] of this row
    block_start,
    block_end,
    vocab_size,
    num_tiles,
    temp,
    threshold,
    fixed_one,
    CHUNK: tl.constexpr,
    STATS_TILE: tl.constexpr,
    STORE_ARGMAX: tl.constexpr,
    STORE_SUMEXP: tl.constexpr,
    APPLY_TEMPERATURE: tl.constexpr,
    FILTERED: tl.constexpr,
):
    """Max, first argmax and fixed-point sum of exp(logit - max) per stats tile."""
    tiles = tl.arange(0, CHUNK // STATS_TILE)
    lanes = tl.arange(0, STATS_TILE)
    for chunk in range(tl.cdiv(block_end - block_start, CHUNK)):
        chunk_start = block_start + chunk * CHUNK
        offsets = chunk_start + tiles[:, None] * STATS_TILE + lanes[None, :]
        logits = load_logits(
            row_ptr, offsets, offsets < vocab_size, temp, threshold, APPLY_TEMPERATURE, FILTERED
        )
        tile_max, tile_argmax = tl.max(logits, axis=1, return_indices=True)
        tile_idx = chunk_start // STATS_TILE + tiles
        in_row = tile_idx < num_tiles
        tl.store(max_ptr + tile_idx, tile_max, mask=in_row)
        if STORE_ARGMAX:
            tl.store(argmax_ptr + tile_idx, tile_idx * STATS_TILE + tile_argmax, mask=in_row)
        if STORE_SUMEXP:
            # Terms in (0, 1] as integers with fixed_one = 2**bits: their sum
            # is exact, hence the same in any order (see the module doc).
            # While nothing is finite the sum stays 0 (and avoids -inf - -inf).
            terms = tl.where(
                tile_max[:, None] > float("-inf"), tl.exp(logits - tile_max[:, None]), 0.0
            )
            fixed = (terms * fixed_one).to(tl.int64)
            tl.store(sumexp_ptr + tile_idx, tl.sum(fixed, axis=1), mask=in_row)


@triton.jit
def row_logsumexp(
    max_ptr,  # [num_tiles] of one row
    sumexp_ptr,  # [num_tiles] of one row, fixed point
    num_tiles,
    fixed_unit,
    NUM_TILES_PAD: tl.constexpr,
):
    tiles = tl.arange(0, NUM_TILES_PAD)
    mask = tiles < num_tiles
    maxes = tl.load(max_ptr + tiles, mask=mask, other=float("-inf"))
    sumexps = tl.load(sumexp_ptr + tiles, mask=mask, other=0)
    row_max = tl.max(maxes, axis=0)
    # Tiles without a finite logit contribute nothing (and no NaN from -inf - -inf).
    scales = tl.exp(tl.where(maxes > float("-inf"), maxes - row_max, float("-inf")))
    # Rescaled per tile, then added as integers: the same bits in any order.
    total = tl.sum((sumexps.to(tl.float64) * scales.to(tl.float64)).to(tl.int64), axis=0)
    return row_max + tl.log(total.to(tl.float32) * fixed_unit)


@triton.jit
def row_argmax(
    max_ptr,  # [num_tiles] of one row
    argmax_ptr,  # [num_tiles] of one row
    num_tiles,
    NUM_TILES_PAD: tl.constexpr,
):
    tiles = tl.arange(0, NUM_TILES_PAD)
    maxes = tl.load(max_ptr + tiles, mask=tiles < num_tiles, other=float("-inf"))
    # Ties go to the lowest tile, and within a tile to the lowest token: torch.argmax.
    row_max, tile = tl.max(maxes, axis=0, return_indices=True)
    return row_max, tl.load(argmax_ptr + tile)
