"""The merge steps of the fused top-k/top-p sampler (``ops/topk_topp.py``).

The merge of a row sees the chunks' lists: the two largest logits of every group
of tokens, and per chunk a *floor* below which the list is incomplete. It

1. keeps the ``SHORT`` largest listed tokens (``short_list``) and decides
   top-k, then top-p, by comparing them pairwise (``decide``): exact for
   every token above the floor, so the row is decided when its cut lies
   above it. This is the common case.
2. Otherwise (top_k beyond the short list, a wide top-p set, three top
   tokens in one group, ties across groups) it takes a bound the cut is
   known to reach from the lists, collects every token at or above it (from
   the lists, and by reading the few chunks whose floor reaches the bound),
   and finds the exact cuts among them (``sample_wide``).

Rows that even this cannot hold go to ``topk_topp_exact.py``.
"""

import triton
import triton.language as tl

from vllm_sampling_plugin.ops.topk_topp_select import (
    NEG_INF_KEY,
    buckets_within,
    distance_bucket,
    gumbel_at,
    largest_key_reaching,
    load_logits_block,
    order_key,
)

# Buckets of the histogram that chooses what the short list keeps.
NUM_BUCKETS = tl.constexpr(32)


@triton.jit
def list_largest(x, valid, top, capacity):
    """At most ``capacity`` of the largest valid ``x`` (``top`` is their max),
    and the *floor*: the key of the largest valid value left out, or of -inf
    if none is. Every value above the floor is listed.

    The cut is chosen on a 32-bucket histogram of ``top - x``, scaled to the
    distance between ``top`` and the mean of the finite values so that it
    adapts to the temperature: one cheap pass. Only the floor must be exact.
    """
    finite = valid & (x > float("-inf")) & (x < float("inf"))
    mean = tl.sum(tl.where(finite, x, 0.0), axis=0) / tl.sum(finite.to(tl.float32), axis=0)
    bucket = distance_bucket(x, top, NUM_BUCKETS / (top - mean), NUM_BUCKETS)
    hist = tl.histogram(bucket, NUM_BUCKETS, mask=valid)
    listed = valid & (bucket < buckets_within(hist, capacity))
    left_out = tl.max(tl.where(valid & ~listed, x, float("-inf")), axis=0)
    return listed, order_key(left_out)


@triton.jit
def short_list(
    listed_logits_ptr,  # [num_tokens, num_chunks, LIST] fp32, -inf: no token
    listed_ids_ptr,  # [num_tokens, num_chunks, LIST] int32
    chunk_floor_ptr,  # [num_tokens, num_chunks] int32 (uint32 key bits)
    short_logits_ptr,  # [SHORT] fp32 scratch of this row
    short_ids_ptr,  # [SHORT] int32 scratch of this row
    row,
    row_max,
    num_chunks,
    capacity,
    CHUNKS_BLOCK: tl.constexpr,
    LIST: tl.constexpr,
    SHORT: tl.constexpr,
):
    """The row's largest listed logits (at most ``capacity <= SHORT``), their
    ids, and the floor: the list holds every token of the row whose key is
    above it. -inf tokens are never listed (they cannot win)."""
    chunks = tl.arange(0, CHUNKS_BLOCK)
    floors = tl.load(chunk_floor_ptr + row + chunks, mask=chunks < num_chunks, other=0)
    floor = tl.max(floors.to(tl.uint32, bitcast=True), axis=0)
    lanes = tl.arange(0, CHUNKS_BLOCK * LIST)
    x = tl.load(
        listed_logits_ptr + row * LIST + lanes,
        mask=lanes < num_chunks * LIST,
        other=float("-inf"),
    )
    listed = x > float("-inf")
    ids = tl.load(listed_ids_ptr + row * LIST + lanes, mask=listed, other=0)
    # Keep at most `capacity` of the largest, raise the floor to the largest
    # one left out, and compact the kept ones through the scratch.
    chosen = listed
    if tl.sum(listed.to(tl.int32), axis=0) > capacity:
        chosen, cut = list_largest(x, listed, row_max, capacity)
        floor = tl.maximum(floor, cut)
    slot = tl.cumsum(chosen.to(tl.int32), axis=0) - 1
    # At most `capacity` are chosen; the bound on the slot guards the scratch.
    tl.store(short_logits_ptr + slot, x, mask=chosen & (slot < SHORT))
    tl.store(short_ids_ptr + slot, ids, mask=chosen & (slot < SHORT))
    tl.debug_barrier()
    x, ids, keys, listed = load_list(
        short_logits_ptr, short_ids_ptr, tl.sum(chosen.to(tl.int32), axis=0), SHORT
    )
    return x, ids, keys, listed, floor


@triton.jit
def load_list(short_logits_ptr, short_ids_ptr, count, SHORT: tl.constexpr):
    """The first ``count`` tokens of a scratch row: logits, ids, keys, and
    which of the ``SHORT`` lanes hold one."""
    lanes = tl.arange(0, SHORT)
    listed = lanes < count
    x = tl.load(short_logits_ptr + lanes, mask=listed, other=float("-inf"))
    ids = tl.load(short_ids_ptr + lanes, mask=listed, other=0)
    return x, ids, tl.where(listed, order_key(x), 0), listed


@triton.jit
def count_and_mass_above(
    keys,  # [SHORT] uint32, 0 where no token
    short_logits_ptr,  # [SHORT] fp32: the same tokens, from the scratch
    count,
    row_max,
    PART: tl.constexpr,
):
    """For every listed token j: how many listed tokens lie strictly above
    it, and their mass ``exp(x - row_max)``. The tokens above are streamed
    from the scratch ``PART`` at a time, which bounds the registers of the
    ``[SHORT, PART]`` comparison."""
    num_above = tl.zeros(keys.shape, dtype=tl.int32)
    mass_above = tl.zeros(keys.shape, dtype=tl.float32)
    for start in range(0, count, PART):
        lanes = start + tl.arange(0, PART)
        part_listed = lanes < count
        part_x = tl.load(short_logits_ptr + lanes, mask=part_listed, other=float("-inf"))
        part_mass = tl.where(part_listed, tl.exp(part_x - row_max), 0.0)
        above = tl.where(part_listed, order_key(part_x), 0)[None, :] > keys[:, None]
        num_above += tl.sum(above.to(tl.int32), axis=1)
        mass_above += tl.sum(tl.where(above, part_mass[None, :], 0.0), axis=1)
    return num_above, mass_above


@triton.jit
def append_taken(x, ids, taken, count, scratch_logits_ptr, scratch_ids_ptr, CAPACITY: tl.constexpr):
    """Append the ``taken`` lanes to the scratch list of ``count`` tokens, in
    lane order; returns the new count (lanes past ``CAPACITY`` are counted,
    not stored)."""
    slot = count + tl.cumsum(taken.to(tl.int32), axis=0) - 1
    tl.store(scratch_logits_ptr + slot, x, mask=taken & (slot < CAPACITY))
    tl.store(scratch_ids_ptr + slot, ids, mask=taken & (slot < CAPACITY))
    return count + tl.sum(taken.to(tl.int32), axis=0)


@triton.jit
def collect_at_least(
    x,  # [CHUNKS_BLOCK * LIST] fp32: the row's listed logits, -inf: no token
    keys,  # [CHUNKS_BLOCK * LIST] uint32 keys of x, 0 where no token
    listed_ids_ptr,  # [num_tokens, num_chunks, LIST] int32
    chunk_floor_ptr,  # [num_tokens, num_chunks] int32 (uint32 key bits)
    row,
    num_chunks,
    logits_row_ptr,  # [vocab]: one row of logits
    col_stride,
    temperature,
    vocab_size,
    bound,
    scratch_logits_ptr,  # [CAPACITY] fp32 scratch of this row
    scratch_ids_ptr,  # [CAPACITY] int32 scratch of this row
    CHUNKS_BLOCK: tl.constexpr,
    CHUNK: tl.constexpr,
    LIST: tl.constexpr,
    CAPACITY: tl.constexpr,
    BLOCK: tl.constexpr,
    APPLY_TEMPERATURE: tl.constexpr,
):
    """Every finite token of the row whose key is at least ``bound`` (> 0),
    into the scratch; returns how many there are (those past ``CAPACITY``
    are counted, not stored).

    A chunk whose floor lies below the bound listed all of them: they are
    taken from its list, all chunks at once. Only a chunk whose floor
    reaches the bound (three top tokens in one group, say) is read again,
    so a row usually costs one chunk's walk, not the row's. The order is
    fixed by the row alone: listed tokens, then the walked chunks in order.
    """
    chunks = tl.arange(0, CHUNKS_BLOCK)
    floors = tl.load(
        chunk_floor_ptr + row + chunks, mask=chunks < num_chunks, other=0
    ).to(tl.uint32, bitcast=True)
    walk = (chunks < num_chunks) & (floors >= bound)
    lanes = tl.arange(0, CHUNKS_BLOCK * LIST)
    lane_floor = tl.load(
        chunk_floor_ptr + row + lanes // LIST, mask=lanes < num_chunks * LIST, other=0
    ).to(tl.uint32, bitcast=True)
    taken = (keys >= bound) & (lane_floor < bound)
    ids = tl.load(listed_ids_ptr + row * LIST + lanes, mask=taken, other=0)
    count = append_taken(x, ids, taken, 0, scratch_logits_ptr, scratch_ids_ptr, CAPACITY)
    while tl.sum(walk.to(tl.int32), axis=0) > 0:
        chunk = tl.min(tl.where(walk, chunks, CHUNKS_BLOCK), axis=0)
        walk = walk & (chunks != chunk)
        chunk_end = chunk * CHUNK + CHUNK
        for start in range(chunk * CHUNK, tl.minimum(chunk_end, vocab_size), BLOCK):
            token_ids, in_vocab, block_x = load_logits_block(
                logits_row_ptr, col_stride, start, temperature, vocab_size,
                1, BLOCK, APPLY_TEMPERATURE,
            )
            in_chunk = in_vocab & (token_ids < chunk_end)
            block_taken = in_chunk & (block_x > float("-inf")) & (order_key(block_x) >= bound)
            count = append_taken(
                block_x, token_ids, block_taken, count, scratch_logits_ptr, scratch_ids_ptr,
                CAPACITY,
            )
    tl.debug_barrier()
    return count


@triton.jit
def decide(
    x,  # [SHORT] fp32: the listed tokens, as in the scratch
    keys,
    listed,
    short_logits_ptr,  # [SHORT] fp32 scratch of this row
    floor,
    row_max,
    filter_k,
    top_k,
    filter_p,
    top_p,
    total_mass,
    PART: tl.constexpr,
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
    mass = tl.where(listed, tl.exp(x - row_max), 0.0)
    # Both tests use "strictly above", so tied tokens stay or go together.
    # Within the top-k set every token above is in the set, so the
    # unmasked mass above is the set's.
    count = tl.sum(listed.to(tl.int32), axis=0)
    num_above, mass_above = count_and_mass_above(keys, short_logits_ptr, count, row_max, PART)
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
def sample_wide(
    listed_logits_ptr,  # [num_tokens, num_chunks, LIST] fp32, -inf: no token
    listed_ids_ptr,  # [num_tokens, num_chunks, LIST] int32
    chunk_floor_ptr,  # [num_tokens, num_chunks] int32 (uint32 key bits)
    row,
    num_chunks,
    logits_row_ptr,  # [vocab]: this row of logits
    col_stride,
    temperature,
    vocab_size,
    row_max,
    filter_k,
    top_k,
    filter_p,
    top_p,
    total_mass,
    bound,
    scratch_logits_ptr,  # [WIDE] fp32 scratch of this row
    scratch_ids_ptr,  # [WIDE] int32 scratch of this row
    key,
    CHUNKS_BLOCK: tl.constexpr,
    CHUNK: tl.constexpr,
    LIST: tl.constexpr,
    SHORT: tl.constexpr,
    PART: tl.constexpr,
    WIDE: tl.constexpr,
    ROW_BLOCK: tl.constexpr,
    APPLY_TEMPERATURE: tl.constexpr,
    USE_FP64: tl.constexpr,
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
    lanes = tl.arange(0, CHUNKS_BLOCK * LIST)
    x = tl.load(
        listed_logits_ptr + row * LIST + lanes,
        mask=lanes < num_chunks * LIST,
        other=float("-inf"),
    )
    listed = x > float("-inf")
    keys = tl.where(listed, order_key(x), 0)
    if bound == 0:
        # The short list could not tell: search the whole list.
        if filter_k:
            bound = largest_key_reaching(keys, listed.to(tl.int32), top_k)
        else:
            mass = tl.where(listed, tl.exp(x - row_max), 0.0)
            bound = largest_key_reaching(keys, mass, top_p * total_mass)
    # The top token always stays (top_p <= 0 would put the bound above it).
    bound = tl.minimum(bound, order_key(row_max))
    sampled = tl.full((), 0, tl.int32)
    decided = bound > 0
    if decided:
        # Every token at or above the bound is collected, and the cuts are at
        # or above it: counts and masses from here are the row's.
        count = collect_at_least(
            x, keys, listed_ids_ptr, chunk_floor_ptr, row, num_chunks, logits_row_ptr,
            col_stride, temperature, vocab_size, bound, scratch_logits_ptr, scratch_ids_ptr,
            CHUNKS_BLOCK, CHUNK, LIST, WIDE, ROW_BLOCK, APPLY_TEMPERATURE,
        )
        decided = count <= WIDE
        if count <= SHORT:
            # The usual case (a few tokens at the bound): the pairwise decision.
            short_x, short_ids, short_keys, collected = load_list(
                scratch_logits_ptr, scratch_ids_ptr, count, SHORT
            )
            keep, _, _ = decide(
                short_x, short_keys, collected, scratch_logits_ptr, bound, row_max,
                filter_k, top_k, filter_p, top_p, total_mass, PART,
            )
            sampled = gumbel_argmax(short_x, short_ids, keep, key, vocab_size, USE_FP64)
        elif decided:
            wide_x, wide_ids, wide_keys, collected = load_list(
                scratch_logits_ptr, scratch_ids_ptr, count, WIDE
            )
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
            sampled = gumbel_argmax(wide_x, wide_ids, keep, key, vocab_size, USE_FP64)
    return sampled, decided


@triton.jit
def gumbel_argmax(x, ids, keep, key, vocab_size, USE_FP64: tl.constexpr):
    """Gumbel-max over the kept lanes: the lowest id among equal scores."""
    score_dtype: tl.constexpr = tl.float64 if USE_FP64 else tl.float32
    score = tl.where(keep, x.to(score_dtype) + gumbel_at(key, ids, USE_FP64), float("-inf"))
    top = tl.max(score, axis=0)
    return tl.min(tl.where(keep & (score == top), ids, vocab_size), axis=0)
