"""The merge of one row: decide its token from its chunks' lists (short list, then
collecting from a bound, then the exact whole-row path) and record which step did."""

import triton
import triton.language as tl

from ..random import request_key
from .exact import sample_row_exactly
from .row import argmax_lowest_id, sample_short, sample_wide

# What `paths_out` reports for a row: which step decided it.
PATH_NO_FILTER = tl.constexpr(0)  # greedy, unfiltered, or a +-inf max
PATH_SHORT_LIST = tl.constexpr(1)  # the pairwise decision on the short list
PATH_COLLECTED = tl.constexpr(2)  # one walk collecting the row from a bound up
PATH_EXACT = tl.constexpr(3)  # the exact whole-row path


@triton.jit
def merge_row(
    token,
    sampled_ptr,  # [num_tokens] int64
    paths_ptr,  # [num_tokens] int32 or None: which step decided each row
    chunk_stats,  # as chunk_pass writes them
    chunk_lists,  # as chunk_pass writes them
    # ([num_tokens, WIDE] fp32 and int32: a row's short list, or its collected
    #  tokens; [num_tokens, 256] int64: the exact path's mass histogram)
    scratch,
    logits,  # ([num_tokens, vocab], row stride, column stride)
    requests,  # (idx_mapping, temperature, seeds, pos, top_k, top_p), as chunk_pass
    vocab_size,
    num_chunks,
    CHUNKS_BLOCK: tl.constexpr,
    LIST: tl.constexpr,
    SHORT: tl.constexpr,
    WIDE: tl.constexpr,
    ROW_BLOCK: tl.constexpr,
    APPLY_TEMPERATURE: tl.constexpr,
    CHUNK: tl.constexpr,
    NOISE: tl.constexpr,
):
    """Decide row ``token`` from its chunks' results (see the module doc).

    Everything the row's merge reads is loaded first, before the first
    reduction: the loads' latencies overlap instead of adding up. (Greedy
    and unfiltered rows read their ~20 KB of unwritten lists for nothing:
    cheaper than making the lists wait for the request's settings.)
    """
    chunk_best_ptr, chunk_best_id_ptr, chunk_mass_ptr, chunk_floor_ptr = chunk_stats
    listed_logits_ptr, listed_ids_ptr = chunk_lists
    idx_mapping_ptr, temperature_ptr, seeds_ptr, pos_ptr, top_k_ptr, top_p_ptr = requests
    req = tl.load(idx_mapping_ptr + token)
    chunks = tl.arange(0, CHUNKS_BLOCK)
    chunk_ok = chunks < num_chunks
    row = token.to(tl.int64) * num_chunks
    best = tl.load(chunk_best_ptr + row + chunks, mask=chunk_ok, other=float("-inf"))
    best_ids = tl.load(chunk_best_id_ptr + row + chunks, mask=chunk_ok, other=vocab_size)
    # [CHUNKS_BLOCK, LIST]: a chunk's list is a row. Rows past the last
    # chunk hold no token and a floor of 0.
    lists = (row + chunks[:, None]) * LIST + tl.arange(0, LIST)[None, :]
    x = tl.load(listed_logits_ptr + lists, mask=chunk_ok[:, None], other=float("-inf"))
    ids = tl.load(listed_ids_ptr + lists, mask=chunk_ok[:, None], other=0)
    floors = tl.load(chunk_floor_ptr + row + chunks, mask=chunk_ok, other=0)
    floors = floors.to(tl.uint32, bitcast=True)
    temperature = tl.load(temperature_ptr + req)
    top_k = tl.load(top_k_ptr + req)
    top_p = tl.load(top_p_ptr + req)
    filter_k = (top_k > 0) & (top_k < vocab_size)
    filter_p = top_p < 1.0
    # Where it matters (filter_k), top_k < vocab_size fits in int32.
    top_k = top_k.to(tl.int32)

    # Chunks are in token order: the lowest id among equal bests is the
    # first chunk's. An all -inf row gives chunk 0's id, 0.
    row_best, sampled = argmax_lowest_id(best, best_ids)
    row_max = row_best.to(tl.float32)
    finite_max = (row_max != float("inf")) & (row_max != float("-inf"))
    # Greedy and unfiltered rows are decided. So is a row whose max is
    # +inf (only +inf tokens can win: the first of them, as the Gumbel
    # kernel picks) or -inf (all tokens are -inf: token 0).
    if (temperature != 0.0) & (filter_k | filter_p) & finite_max:
        key = request_key(tl.load(seeds_ptr + req), tl.load(pos_ptr + token), NOISE)
        filters = (filter_k, top_k, filter_p, top_p)
        # Top-p alone needs the row's total mass: the chunks' sums.
        total_mass = 0.0
        if filter_p & ~filter_k:
            chunk_mass = tl.load(chunk_mass_ptr + row + chunks, mask=chunk_ok, other=0.0)
            total_mass = tl.sum(chunk_mass * tl.exp(best.to(tl.float32) - row_max), axis=0)
        sampled, path = _sample_filtered_row(
            token, x, ids, floors, row_max, filters, total_mass, key, scratch, logits,
            temperature, vocab_size, LIST, SHORT, WIDE, ROW_BLOCK, APPLY_TEMPERATURE, CHUNK,
            NOISE,
        )
        if paths_ptr is not None:
            tl.store(paths_ptr + token, path)
    elif paths_ptr is not None:
        tl.store(paths_ptr + token, PATH_NO_FILTER)
    # Every path keeps the top token, so this never binds; it is here because
    # an id outside the vocabulary would crash the engine.
    tl.store(sampled_ptr + token, tl.minimum(sampled, vocab_size - 1))


@triton.jit
def _sample_filtered_row(
    token,
    x,  # [CHUNKS_BLOCK, LIST]: the row's listed logits, -inf past the lists
    ids,  # [CHUNKS_BLOCK, LIST]: their token ids
    floors,  # [CHUNKS_BLOCK] uint32: each chunk's floor order key
    row_max,
    filters,  # (filter_k, top_k, filter_p, top_p)
    total_mass,  # the row's mass for top-p alone, else 0
    key,
    scratch,  # as merge_row
    logits,  # as merge_row
    temperature,
    vocab_size,
    LIST: tl.constexpr,
    SHORT: tl.constexpr,
    WIDE: tl.constexpr,
    ROW_BLOCK: tl.constexpr,
    APPLY_TEMPERATURE: tl.constexpr,
    CHUNK: tl.constexpr,
    NOISE: tl.constexpr,
):
    """A top-k/top-p row's token and the step that decided it: the short
    list, else the tokens collected from a bound up, else the whole row."""
    scratch_logits_ptr, scratch_ids_ptr, mass_hist_ptr = scratch
    logits_ptr, logits_row_stride, logits_col_stride = logits
    filter_k, top_k, _, _ = filters
    row_logits = (
        logits_ptr + token.to(tl.int64) * logits_row_stride,
        logits_col_stride,
        temperature,
        vocab_size,
    )
    row_scratch = (
        scratch_logits_ptr + token.to(tl.int64) * WIDE,
        scratch_ids_ptr + token.to(tl.int64) * WIDE,
    )
    # The short list needs the top-k set and room above the k-th token
    # for the histogram's coarseness: with k + k/4 + 2, 99% of rows of
    # k = 50 are decided on the half-size list (simulated on N(0, 3^2)
    # rows; the rest mostly have three top tokens in one group). Top-p
    # alone takes the full list. The pairwise work grows with the
    # square of the lanes, so lists that fit in half take that size.
    capacity = tl.where(
        filter_k, tl.minimum(tl.maximum(top_k + top_k // 4 + 2, SHORT // 4), SHORT), SHORT
    )
    if capacity <= SHORT // 2:
        short_sampled, decided, bound = sample_short(
            x, ids, floors, row_scratch, row_max, capacity, filters, total_mass, key,
            vocab_size, SHORT // 2, NOISE,
        )
    else:
        short_sampled, decided, bound = sample_short(
            x, ids, floors, row_scratch, row_max, capacity, filters, total_mass, key,
            vocab_size, SHORT, NOISE,
        )
    path = PATH_SHORT_LIST
    if decided:
        sampled = short_sampled
    else:
        path = PATH_COLLECTED
        sampled, decided = sample_wide(
            x, ids, floors, row_logits, row_max, filters, total_mass, bound, row_scratch,
            key, CHUNK, LIST, SHORT, WIDE, APPLY_TEMPERATURE, NOISE,
        )
    if not decided:
        path = PATH_EXACT
        sampled = sample_row_exactly(
            row_logits,
            row_max,
            filters,
            mass_hist_ptr + token.to(tl.int64) * 256,
            key,
            ROW_BLOCK,
            APPLY_TEMPERATURE,
            NOISE,
        )
    return sampled, path
