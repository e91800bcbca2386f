"""The merge steps of the fused top-k/top-p sampler (``ops/topk_topp``).

The merge of a row sees the chunks' lists: the two largest logits of every group
of tokens, and per chunk a *floor* below which the list is incomplete. It

1. keeps the largest listed tokens, about ``k + k/4`` of them or ``SHORT``
   for top-p alone, and decides top-k, then top-p, by
   comparing them pairwise (``decide``), on half the lanes when they fit
   (``sample_short``): exact for every token above the floor, so the row is
   decided when its cut lies above it. This is the common case.
2. Otherwise (top_k beyond the short list, a wide top-p set, three top
   tokens in one group, ties across groups) it takes a bound the cut is
   known to reach from the lists, collects every token at or above it (from
   the lists, and by reading the few chunks whose floor reaches the bound),
   and finds the exact cuts among them (``sample_wide``).

Rows that even this cannot hold go to ``exact.py``.
"""

import triton
import triton.language as tl

from ..random import FP64_PHILOX
from .select import (
    NEG_INF_KEY,
    buckets_within,
    distance_bucket,
    gumbel_at,
    largest_key_reaching,
    load_logits_block,
    order_key,
)

# Buckets of the histogram that chooses what the short list keeps.
NUM_BUCKETS = tl.constexpr(64)


@triton.jit
def _add_pairs(a_sum, a_count, b_sum, b_count):
    return a_sum + b_sum, a_count + b_count


@triton.jit
def _larger_then_lower_id(a_score, a_id, b_score, b_id):
    b_wins = (b_score > a_score) | ((b_score == a_score) & (b_id < a_id))
    return tl.where(b_wins, b_score, a_score), tl.where(b_wins, b_id, a_id)


@triton.jit
def argmax_lowest_id(score, ids):
    """The largest ``score`` of a 1-D block and the lowest id among its
    equals: one reduction (a pair), not a max and then a min.

    Used where a row is reduced once (the merge). The streaming kernels
    (Gumbel, the top-k/top-p chunk pass, rejection block winners) keep the
    max-then-min form: routing them through this pair reduction measured
    15-20% slower at B = 256 / 1024 and 2x at B = 64 for the
    fused top-k/top-p kernel (docs/benchmarks.md, layout check)."""
    return tl.reduce((score, ids), 0, _larger_then_lower_id)


@triton.jit
def list_largest(x, valid, top, capacity):
    """At most ``capacity`` of the largest valid ``x`` (a 2-D block of finite
    values where valid; ``top`` is their max), and the *floor*: the key of
    the largest valid value left out, or of -inf if none is. Every value
    above the floor is listed.

    The cut is chosen on a 64-bucket histogram of ``top - x``, scaled to the
    distance between ``top`` and the mean of the values so that it adapts
    to the temperature: one cheap pass. Only the floor must be exact.
    """
    total, count = tl.reduce((tl.where(valid, x, 0.0), valid.to(tl.float32)), 1, _add_pairs)
    total, count = tl.reduce((total, count), 0, _add_pairs)
    bucket = distance_bucket(x, top, NUM_BUCKETS / (top - total / count), NUM_BUCKETS)
    lanes: tl.constexpr = x.shape[0] * x.shape[1]
    hist = tl.histogram(
        tl.reshape(bucket, [lanes]), NUM_BUCKETS, mask=tl.reshape(valid, [lanes])
    )
    listed = valid & (bucket < buckets_within(hist, capacity))
    left_out = tl.max(tl.max(tl.where(valid & ~listed, x, float("-inf")), axis=1), axis=0)
    return listed, order_key(left_out)


@triton.jit
def append_taken(x, ids, taken, count, scratch, CAPACITY: tl.constexpr):
    """Append the ``taken`` lanes of a 2-D block to the scratch list of
    ``count`` tokens (``scratch``: its logits and ids pointers), in row-major
    order; returns the new count (lanes past ``CAPACITY`` are counted, not
    stored).

    The slots come from a scan along each row plus one over the row totals:
    short scans within a warp, which cost a fraction of one scan over the
    flattened block.
    """
    scratch_logits_ptr, scratch_ids_ptr = scratch
    taken_count = taken.to(tl.int32)
    per_row = tl.sum(taken_count, axis=1)
    row_start = count + tl.cumsum(per_row, axis=0) - per_row
    slot = row_start[:, None] + tl.cumsum(taken_count, axis=1) - 1
    tl.store(scratch_logits_ptr + slot, x, mask=taken & (slot < CAPACITY))
    tl.store(scratch_ids_ptr + slot, ids, mask=taken & (slot < CAPACITY))
    return count + tl.sum(per_row, axis=0)


@triton.jit
def load_list(scratch, count, SHORT: tl.constexpr):
    """The first ``count`` tokens of a scratch row: logits, ids, keys, and
    which of the ``SHORT`` lanes hold one."""
    scratch_logits_ptr, scratch_ids_ptr = scratch
    lanes = tl.arange(0, SHORT)
    listed = lanes < count
    x = tl.load(scratch_logits_ptr + lanes, mask=listed, other=float("-inf"))
    ids = tl.load(scratch_ids_ptr + lanes, mask=listed, other=0)
    return x, ids, tl.where(listed, order_key(x), 0), listed


@triton.jit
def collect_at_least(
    x,  # [CHUNKS_BLOCK, LIST] fp32: the row's listed logits, -inf: no token
    keys,  # [CHUNKS_BLOCK, LIST] uint32 keys of x, 0 where no token
    ids,  # [CHUNKS_BLOCK, LIST] int32
    floors,  # [CHUNKS_BLOCK] uint32: the chunks' floors, 0 past the last chunk
    row_logits,  # ([vocab] logits of one row, column stride, temperature, vocab_size)
    bound,
    scratch,  # [CAPACITY] each, this row's: (logits fp32, ids int32)
    CHUNK: tl.constexpr,
    LIST: tl.constexpr,
    CAPACITY: tl.constexpr,
    APPLY_TEMPERATURE: tl.constexpr,
):
    """Every finite token of the row whose key is at least ``bound`` (> 0),
    into the scratch; returns how many there are, or once that passes
    ``CAPACITY`` a count above it (no more chunks are read: the row is then
    the exact path's whatever the rest holds).

    A chunk whose floor lies below the bound listed all of them: they are
    taken from its list, all chunks at once. Only a chunk whose floor
    reaches the bound (three top tokens in one group, say) is read again,
    so a row usually costs one chunk's walk, not the row's. The order is
    fixed by the row alone: listed tokens, then the walked chunks in order.
    """
    chunks = tl.arange(0, floors.shape[0])
    walk = floors >= bound
    taken = (keys >= bound) & ~walk[:, None]
    count = append_taken(x, ids, taken, 0, scratch, CAPACITY)
    while (tl.max(walk.to(tl.int32), axis=0) > 0) & (count <= CAPACITY):
        chunk = tl.min(tl.where(walk, chunks, floors.shape[0]), axis=0)
        walk = walk & (chunks != chunk)
        token_ids, in_vocab, block_x = load_logits_block(
            row_logits, chunk * CHUNK, 1, CHUNK, APPLY_TEMPERATURE
        )
        block_taken = in_vocab & (block_x > float("-inf")) & (order_key(block_x) >= bound)
        # The chunk in one block, shaped like the lists (LIST divides CHUNK).
        block_shape: tl.constexpr = [CHUNK // LIST, LIST]
        block_x = tl.reshape(block_x, block_shape)
        token_ids = tl.reshape(token_ids, block_shape)
        block_taken = tl.reshape(block_taken, block_shape)
        count = append_taken(block_x, token_ids, block_taken, count, scratch, CAPACITY)
    tl.debug_barrier()
    return count


@triton.jit
def decide(
    x,  # [SHORT] fp32: the listed tokens
    keys,
    listed,
    floor,
    row_max,
    filters,  # (filter_k, top_k, filter_p, top_p): each filter, whether on and its value
    total_mass,
):
    """Top-k then top-p on the listed tokens (every token of the row above
    ``floor`` is listed).

    Returns which listed tokens survive; whether that is the row's answer
    (the cut lies above the floor, or only -inf tokens lie below it); and,
    for rows it does not decide, a bound the row's cut is known to reach
    (the k-th largest listed key; for top-p alone, where the listed mass
    reaches p), or 0 when these tokens cannot tell. ``total_mass`` is the
    row's (used by top-p alone).
    """
    filter_k, top_k, filter_p, top_p = filters
    mass = tl.where(listed, tl.exp(x - row_max), 0.0)
    # For every token j, how many listed tokens lie strictly above it, and
    # their mass: one [SHORT, SHORT] comparison in registers. Both tests use
    # "strictly above", so tied tokens stay or go together. Within the
    # top-k set every token above is in the set, so the unmasked mass above
    # is the set's.
    # (Laid out [above, token] and summed over axis 0: measured 2-2.5x
    # faster than the transposed block: docs/benchmarks.md.)
    above = keys[:, None] > keys[None, :]
    num_above = tl.sum(above.to(tl.int32), axis=0)
    mass_above = tl.sum(tl.where(above, mass[:, None], 0.0), axis=0)
    keep = listed
    if filter_k:
        keep = listed & (num_above < top_k)
        total_mass = tl.sum(tl.where(keep, mass, 0.0), axis=0)
    top_p_mass = top_p * total_mass
    if filter_p:
        keep = keep & (mass_above < top_p_mass)
    # The top token always stays, even for top_p <= 0.
    keep = keep | (listed & (keys == order_key(row_max)))

    # Counts and masses are the row's for every token above the floor: the
    # row is decided when at least k tokens (top-k), or at least p of the
    # mass (top-p alone), lie above it.
    above_floor = listed & (keys > floor)
    # The bound: the largest key with at least k listed tokens (top-k), or p
    # of the mass (top-p alone), at or above it; the row has at least as
    # many, so its cut is at or above. These are the row's largest listed
    # tokens: if they reach k (or p), the whole list gives the same bound.
    if filter_k:
        decided = tl.sum(above_floor.to(tl.int32), axis=0) >= top_k
        reaching = listed & (num_above + 1 >= top_k)
    else:
        mass_above_floor = tl.sum(tl.where(above_floor, mass, 0.0), axis=0)
        decided = (mass_above_floor >= top_p_mass) & (mass_above_floor > 0.0)
        reaching = listed & (mass_above + mass >= top_p_mass)
    bound = tl.max(tl.where(reaching, keys, 0), axis=0)
    return keep, decided | (floor <= NEG_INF_KEY), bound


@triton.jit
def sample_short(
    x,  # [CHUNKS_BLOCK, LIST] fp32: the row's listed logits, -inf: no token
    ids,  # [CHUNKS_BLOCK, LIST] int32
    floors,  # [CHUNKS_BLOCK] uint32: the chunks' floors, 0 past the last chunk
    scratch,  # [LANES] each, this row's: (logits fp32, ids int32)
    row_max,
    capacity,
    filters,  # (filter_k, top_k, filter_p, top_p): each filter, whether on and its value
    total_mass,
    key,
    vocab_size,
    LANES: tl.constexpr,
    NOISE: tl.constexpr,
):
    """The common step: the short list, the row's largest listed logits (at
    most ``capacity <= LANES``; -inf tokens are never listed: they cannot
    win), decided pairwise, and the draw. Returns ``decide_listed``'s
    (token, decided, bound)."""
    # The list holds every token of the row above the largest chunk floor.
    # Keep at most `capacity` of the largest, raise the floor to the
    # largest one left out, and compact the kept ones through the scratch.
    floor = tl.max(floors, axis=0)
    chosen, cut = list_largest(x, x > float("-inf"), row_max, capacity)
    count = append_taken(x, ids, chosen, 0, scratch, LANES)
    tl.debug_barrier()
    return decide_listed(
        scratch, count, tl.maximum(floor, cut), row_max, filters, total_mass, key, vocab_size,
        LANES, NOISE,
    )


@triton.jit
def sample_wide(
    x,  # [CHUNKS_BLOCK, LIST] fp32: the row's listed logits, -inf: no token
    ids,  # [CHUNKS_BLOCK, LIST] int32
    floors,  # [CHUNKS_BLOCK] uint32: the chunks' floors, 0 past the last chunk
    row_logits,  # ([vocab] logits of one row, column stride, temperature, vocab_size)
    row_max,
    filters,  # (filter_k, top_k, filter_p, top_p): each filter, whether on and its value
    total_mass,
    bound,
    scratch,  # [WIDE] each, this row's: (logits fp32, ids int32)
    key,
    CHUNK: tl.constexpr,
    LIST: tl.constexpr,
    SHORT: tl.constexpr,
    WIDE: tl.constexpr,
    APPLY_TEMPERATURE: tl.constexpr,
    NOISE: tl.constexpr,
):
    """For rows the short list cannot decide: top_k beyond it, a wide top-p
    set, three top tokens in one group, ties across groups.

    ``bound`` is one the row's cut is known to reach (the k-th largest
    listed logit; for top-p alone, where the listed mass reaches p), found
    on the short list by ``decide``, or 0: then it is searched for here.
    ``collect_at_least`` gathers every token at or above it (from the lists,
    reading again only the chunks whose floor reaches the bound). Up to
    ``SHORT`` of them (the usual case: a few tokens at the bound) are decided
    pairwise, as the short list is; up to ``WIDE``, by bit-by-bit searches.
    Returns (token, decided).
    """
    filter_k, top_k, filter_p, top_p = filters
    vocab_size = row_logits[3]
    listed = x > float("-inf")
    keys = tl.where(listed, order_key(x), 0)
    if bound == 0:
        # The short list could not tell: search the whole list.
        lanes: tl.constexpr = x.shape[0] * x.shape[1]
        flat_keys = tl.reshape(keys, [lanes])
        if filter_k:
            bound = largest_key_reaching(flat_keys, tl.reshape(listed.to(tl.int32), [lanes]), top_k)
        else:
            mass = tl.where(listed, tl.exp(x - row_max), 0.0)
            bound = largest_key_reaching(flat_keys, tl.reshape(mass, [lanes]), top_p * total_mass)
    # The top token always stays (top_p <= 0 would put the bound above it).
    bound = tl.minimum(bound, order_key(row_max))
    sampled = tl.full((), 0, tl.int32)
    decided = bound > 0
    if decided:
        # Every token at or above the bound is collected, and the cuts are at
        # or above it: counts and masses from here are the row's.
        count = collect_at_least(
            x, keys, ids, floors, row_logits, bound, scratch, CHUNK, LIST, WIDE,
            APPLY_TEMPERATURE,
        )
        decided = count <= WIDE
        # The usual case (a few tokens at the bound): the pairwise decision,
        # on half the short list's lanes when they hold the tokens.
        if count <= SHORT // 2:
            sampled, _, _ = decide_listed(
                scratch, count, bound, row_max, filters, total_mass, key, vocab_size,
                SHORT // 2, NOISE,
            )
        elif count <= SHORT:
            sampled, _, _ = decide_listed(
                scratch, count, bound, row_max, filters, total_mass, key, vocab_size, SHORT,
                NOISE,
            )
        elif decided:
            sampled = _sample_collected(
                scratch, count, row_max, filters, total_mass, key, vocab_size, WIDE, NOISE
            )
    return sampled, decided


@triton.jit
def _sample_collected(
    scratch,  # [WIDE] each, this row's: (logits fp32, ids int32) of the collected tokens
    count,
    row_max,
    filters,  # (filter_k, top_k, filter_p, top_p)
    total_mass,
    key,
    vocab_size,
    WIDE: tl.constexpr,
    NOISE: tl.constexpr,
):
    """The token of a row whose cuts lie among its ``count <= WIDE`` collected
    tokens, by bit-by-bit searches for the top-k and top-p keys."""
    filter_k, top_k, filter_p, top_p = filters
    wide_x, wide_ids, wide_keys, collected = load_list(scratch, count, WIDE)
    top_k_key = tl.full((), 0, tl.uint32)
    if filter_k:
        top_k_key = largest_key_reaching(wide_keys, collected.to(tl.int32), top_k)
    mass = tl.where(collected & (wide_keys >= top_k_key), tl.exp(wide_x - row_max), 0.0)
    if filter_k:
        total_mass = tl.sum(mass, axis=0)
    top_p_key = tl.full((), 0, tl.uint32)
    if filter_p:
        top_p_key = largest_key_reaching(wide_keys, mass, top_p * total_mass)
    # The top token always stays, even for top_p <= 0.
    threshold = tl.minimum(tl.maximum(top_k_key, top_p_key), order_key(row_max))
    keep = collected & (wide_keys >= threshold)
    return gumbel_argmax(wide_x, wide_ids, keep, key, vocab_size, NOISE)


@triton.jit
def decide_listed(
    scratch,  # [LANES] each: (logits fp32, ids int32) of the tokens
    count,
    floor,
    row_max,
    filters,  # (filter_k, top_k, filter_p, top_p): each filter, whether on and its value
    total_mass,
    key,
    vocab_size,
    LANES: tl.constexpr,
    NOISE: tl.constexpr,
):
    """``decide`` on the ``count <= LANES`` tokens of a scratch list (every
    token of the row above ``floor``), and the draw among the survivors.
    Returns (token, decided, bound); the token is the row's if decided."""
    x, ids, keys, listed = load_list(scratch, count, LANES)
    keep, decided, bound = decide(x, keys, listed, floor, row_max, filters, total_mass)
    return gumbel_argmax(x, ids, keep, key, vocab_size, NOISE), decided, bound


@triton.jit
def gumbel_argmax(x, ids, keep, key, vocab_size, NOISE: tl.constexpr):
    """Gumbel-max over the kept lanes: the lowest id among equal scores."""
    score_dtype: tl.constexpr = tl.float64 if NOISE >= FP64_PHILOX else tl.float32
    score = tl.where(keep, x.to(score_dtype) + gumbel_at(key, ids, NOISE), float("-inf"))
    _, sampled = argmax_lowest_id(score, tl.where(keep, ids, vocab_size))
    return sampled
