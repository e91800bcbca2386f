"""The chunk pass: one program reads one chunk of a row once and leaves what the
merge needs (the listed top logits per group, the chunk's floor, best and mass)."""

import triton
import triton.language as tl

from ..random import FP64_PHILOX, gumbel_block, request_key
from .select import load_logits_block, order_key


@triton.jit
def chunk_pass(
    token,
    chunk,
    num_chunks,
    # [num_tokens, num_chunks] each: (best score: fp32, fp64 for FP64 noise;
    #  its id: int32; mass: fp32; floor: int32, uint32 key bits)
    chunk_stats,
    # [num_tokens, num_chunks, LIST] each: (logits: fp32, -inf: no token; ids: int32)
    chunk_lists,
    # (logits [num_tokens, vocab], row stride, column stride)
    logits,
    # (idx_mapping [num_tokens], temperature [max_num_reqs] fp32,
    #  seeds [max_num_reqs] int64, pos [num_tokens] int64,
    #  top_k [max_num_reqs] int32/int64, top_p [max_num_reqs] fp32)
    requests,
    vocab_size,
    CHUNK: tl.constexpr,
    GROUP: tl.constexpr,
    PER_GROUP: tl.constexpr,
    LIST: tl.constexpr,
    TILE: tl.constexpr,
    APPLY_TEMPERATURE: tl.constexpr,
    NOISE: tl.constexpr,
):
    """One chunk of a row: its list, floor and best (see the module doc)."""
    chunk_best_ptr = chunk_stats[0]
    chunk_best_id_ptr = chunk_stats[1]
    logits_ptr, logits_row_stride, logits_col_stride = logits
    idx_mapping_ptr, temperature_ptr, seeds_ptr, pos_ptr, top_k_ptr, top_p_ptr = requests
    req = tl.load(idx_mapping_ptr + token)
    temperature = tl.load(temperature_ptr + req)
    top_k = tl.load(top_k_ptr + req)
    filter_k = (top_k > 0) & (top_k < vocab_size)
    filter_p = tl.load(top_p_ptr + req) < 1.0

    chunk_start = chunk * CHUNK
    row_logits = (
        logits_ptr + token.to(tl.int64) * logits_row_stride,
        logits_col_stride,
        temperature,
        vocab_size,
    )
    out = token.to(tl.int64) * num_chunks + chunk
    score_dtype: tl.constexpr = tl.float64 if NOISE >= FP64_PHILOX else tl.float32

    if (temperature != 0.0) & ~(filter_k | filter_p):
        # Nothing to filter: this chunk's Gumbel winner, as the Gumbel kernel
        # finds it.
        key = request_key(tl.load(seeds_ptr + req), tl.load(pos_ptr + token), NOISE)
        _chunk_gumbel_winner(
            row_logits, chunk_start, key, chunk_stats, out, vocab_size, CHUNK, TILE,
            APPLY_TEMPERATURE, NOISE,
        )
    else:
        # [groups, GROUP]: a group's tokens sit in neighbouring lanes, so the
        # per-group reductions stay within a warp.
        token_ids, in_vocab, x = load_logits_block(
            row_logits, chunk_start, CHUNK // GROUP, GROUP, APPLY_TEMPERATURE
        )
        if temperature == 0.0:
            # Greedy: the max and its lowest id.
            chunk_max = tl.max(tl.max(x, axis=1), axis=0)
            chunk_argmax = tl.min(
                tl.min(tl.where(x == chunk_max, token_ids, vocab_size), axis=1), axis=0
            )
        else:
            chunk_max, chunk_argmax = list_chunk(
                x, token_ids, in_vocab, vocab_size, out, chunk_stats, chunk_lists, filter_k,
                filter_p, LIST, PER_GROUP,
            )
        # Greedy rows and rows whose max is +-inf are decided by these.
        tl.store(chunk_best_ptr + out, chunk_max.to(score_dtype))
        tl.store(chunk_best_id_ptr + out, chunk_argmax)


@triton.jit
def _chunk_gumbel_winner(
    row_logits,  # ([vocab] logits of one row, column stride, temperature, vocab_size)
    chunk_start,
    key,
    chunk_stats,  # as chunk_pass
    out,  # this chunk's entry in chunk_stats
    vocab_size,
    CHUNK: tl.constexpr,
    TILE: tl.constexpr,
    APPLY_TEMPERATURE: tl.constexpr,
    NOISE: tl.constexpr,
):
    """Stores the chunk's best Gumbel score and its lowest id, walking the
    chunk tile by tile to keep the noise's registers low."""
    chunk_best_ptr = chunk_stats[0]
    chunk_best_id_ptr = chunk_stats[1]
    score_dtype: tl.constexpr = tl.float64 if NOISE >= FP64_PHILOX else tl.float32
    best = tl.full([TILE], float("-inf"), score_dtype)
    best_ids = chunk_start + tl.arange(0, TILE)
    for tile in tl.static_range(CHUNK // TILE):
        start = chunk_start + tile * TILE
        tile_ids, _, tile_logits = load_logits_block(
            row_logits, start, 1, TILE, APPLY_TEMPERATURE
        )
        score = tile_logits.to(score_dtype) + gumbel_block(key, start, TILE, NOISE)
        # Strictly greater: the earlier token keeps a tie.
        wins = score > best
        best = tl.where(wins, score, best)
        best_ids = tl.where(wins, tile_ids, best_ids)
    chunk_best = tl.max(best, axis=0)
    tl.store(chunk_best_ptr + out, chunk_best)
    tl.store(
        chunk_best_id_ptr + out,
        tl.min(tl.where(best == chunk_best, best_ids, vocab_size), axis=0),
    )


@triton.jit
def list_chunk(
    x,  # [groups, GROUP] fp32: the chunk's logits, one group per row
    token_ids,  # [groups, GROUP] int32
    in_vocab,  # [groups, GROUP]
    vocab_size,
    out,  # the chunk's index in chunk_stats, row * num_chunks + chunk
    chunk_stats,  # as chunk_pass takes them (the best score and id are not written)
    chunk_lists,  # as chunk_pass takes them
    filter_k,
    filter_p,
    LIST: tl.constexpr,
    PER_GROUP: tl.constexpr,
):
    """A filtered row's chunk: its list and floor, and for top-p alone its
    mass relative to its max. Returns the chunk's max and its lowest id."""
    chunk_mass_ptr = chunk_stats[2]
    chunk_floor_ptr = chunk_stats[3]
    listed_logits_ptr, listed_ids_ptr = chunk_lists
    chunk_max, chunk_argmax, floor = list_largest_per_group(
        x, token_ids, vocab_size, listed_logits_ptr + out * LIST, listed_ids_ptr + out * LIST,
        PER_GROUP,
    )
    tl.store(chunk_floor_ptr + out, floor.to(tl.int32, bitcast=True))
    if filter_p & ~filter_k:
        # Top-p over the whole row needs the row's total mass.
        mass = tl.where(x == chunk_max, 1.0, tl.exp(x - chunk_max))
        mass = tl.where(in_vocab, mass, 0.0)
        tl.store(chunk_mass_ptr + out, tl.sum(tl.sum(mass, axis=1), axis=0))
    return chunk_max, chunk_argmax


@triton.jit
def list_largest_per_group(
    x,  # [groups, GROUP] fp32: the chunk's logits, one group per row
    token_ids,  # [groups, GROUP] int32
    vocab_size,
    listed_logits_ptr,  # [PER_GROUP, groups] fp32 of this chunk, -inf: no token
    listed_ids_ptr,  # [PER_GROUP, groups] int32 of this chunk
    PER_GROUP: tl.constexpr,
):
    """List the ``PER_GROUP`` largest logits of every group (lowest id first
    among equals) with their ids. Returns the chunk's max, its lowest id,
    and the *floor*: the key of the largest logit left out. Every token
    above the floor is listed.

    One segmented max reduction per listed rank and no scan: the cheapest
    selection that lists a chunk's top tokens unless more than
    ``PER_GROUP`` of them share a group.
    """
    groups: tl.constexpr = x.shape[0]
    lanes = tl.arange(0, groups)
    for rank in tl.static_range(PER_GROUP):
        best = tl.max(x, axis=1)
        best_id = tl.min(tl.where(x == best[:, None], token_ids, vocab_size), axis=1)
        tl.store(listed_logits_ptr + rank * groups + lanes, best)
        tl.store(listed_ids_ptr + rank * groups + lanes, best_id)
        if rank == 0:
            # Groups are in token order: the chunk's max with its lowest id.
            chunk_max = tl.max(best, axis=0)
            chunk_argmax = tl.min(tl.where(best == chunk_max, best_id, vocab_size), axis=0)
        x = tl.where(token_ids == best_id[:, None], float("-inf"), x)
    floor = order_key(tl.max(tl.max(x, axis=1), axis=0))
    return chunk_max, chunk_argmax, floor
