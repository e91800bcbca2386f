"""Fused top-k/top-p sampling: mask and Gumbel-max draw without sorting.

Row ``i`` is drawn from ``softmax(logits[i] / T)`` restricted first to its
top-k tokens and then to the top-p set of that renormalised distribution, by
Gumbel-max with the noise of ``ops/random.py``: the token equals what the
plain Gumbel kernel (``ops/gumbel.py``) picks on the masked row. Every
threshold is an exact search on order keys (``topk_topp_select.py``), so ties
at a threshold are kept or dropped together. ``docs/ops-topk-topp.md`` has
the algorithm and its cost.

No host synchronisation. ``_top_k_top_p_kernel`` runs one program per
(row, chunk of ``CHUNK`` tokens); the work has two phases:

1. ``_chunk_pass`` reads the chunk's logits once. It lists the
   ``PER_GROUP`` largest logits of every group of ``GROUP`` tokens with
   their ids, and the chunk's *floor*: the largest logit it left out.
   Greedy rows only need the chunk's max and argmax; rows without
   top-k/top-p draw their chunk's Gumbel winner instead.
2. ``_merge_row`` merges a row's lists: in a launch of one wave, the
   row's last chunk to finish runs it (a per-row arrival counter: one
   launch); larger launches run it in ``_merge_kernel``, one program per
   row, since the merge's registers would slow the streaming. Above the
   highest floor the lists hold every token of the row, so a cut found on
   them that lies above it is the row's. The steps (``topk_topp_row.py``):
   a pairwise decision on the short list (the common case), else
   collecting every token from a proven bound up (from the lists, reading
   again only the chunks whose floor reaches the bound), else the exact
   whole-row path (``topk_topp_exact.py``).
"""

from __future__ import annotations

import dataclasses
import functools

import torch
import triton
import triton.language as tl

from ..random import gumbel_block, request_key
from .exact import MAX_VOCAB_SIZE, sample_row_exactly
from .row import (
    argmax_lowest_id,
    sample_short,
    sample_wide,
)
from .select import (
    RADIX_BINS,
    load_logits_block,
    order_key,
)


@dataclasses.dataclass(frozen=True)
class TopKTopPTuning:
    """Launch shape. It depends on the vocabulary only (never on the batch),
    so a row's arithmetic, and thus its token, is batch invariant."""

    # Tokens per program of the first kernel (power of two).
    chunk: int = 4096
    # A chunk lists the `per_group` largest logits of every `group`
    # consecutive tokens (powers of two): 64 per chunk by default, ~2400 per
    # row of 151936. Rows are decided from the lists unless more than
    # `per_group` of their top tokens share a group (rare for top_k in the
    # tens or low hundreds).
    group: int = 128
    per_group: int = 2
    # Listed tokens the merge keeps and compares pairwise (power of
    # two): the common rows are decided on it. A row with top-k keeps
    # about k + k/4 of them, and a list that fits in half the lanes is
    # decided on half (the pairwise work grows with the square); rows with
    # top_k beyond about 4/5 of this size take the collect step.
    short_list: int = 128
    # Other rows collect every token from a bound up, in one walk over the
    # row, into this many lanes (power of two); rows needing more (top_k in
    # the thousands, very wide top-p sets) take the exact whole-row path.
    wide_list: int = 4096
    # Warps of a program: it streams its chunk, and the row's last chunk
    # then merges the row.
    num_warps: int = 8
    # A launch of at most this many programs (rows x chunks: one wave on an
    # H100) merges each row in the chunk kernel, as its last chunk finishes:
    # one launch instead of two. Larger ones merge in a second kernel of
    # `merge_warps` warps, since the merge's registers would otherwise limit
    # how many chunk programs an SM runs at once.
    fused_max_programs: int = 132
    merge_warps: int = 16
    # Tokens per loop step of the exact whole-row path (power of two).
    row_block: int = 2048


DEFAULT_TUNING = TopKTopPTuning()
# Tokens per step when a chunk of an unfiltered row draws its Gumbel winner.
GUMBEL_TILE = 1024
# What `paths_out` reports for a row: which step decided it.
PATH_NO_FILTER = tl.constexpr(0)  # greedy, unfiltered, or a +-inf max
PATH_SHORT_LIST = tl.constexpr(1)  # the pairwise decision on the short list
PATH_COLLECTED = tl.constexpr(2)  # one walk collecting the row from a bound up
PATH_EXACT = tl.constexpr(3)  # the exact whole-row path


@triton.jit
def _chunk_pass(
    token,
    chunk,
    num_chunks,
    chunk_best_ptr,  # [num_tokens, num_chunks] fp32 (fp64 if USE_FP64)
    chunk_best_id_ptr,  # [num_tokens, num_chunks] int32
    chunk_mass_ptr,  # [num_tokens, num_chunks] fp32
    chunk_floor_ptr,  # [num_tokens, num_chunks] int32 (uint32 key bits)
    listed_logits_ptr,  # [num_tokens, num_chunks, LIST] fp32, -inf: no token
    listed_ids_ptr,  # [num_tokens, num_chunks, LIST] int32
    logits_ptr,  # [num_tokens, vocab]
    logits_row_stride,
    logits_col_stride,
    idx_mapping_ptr,  # [num_tokens]
    temperature_ptr,  # [max_num_reqs] fp32
    seeds_ptr,  # [max_num_reqs] int64
    pos_ptr,  # [num_tokens] int64
    top_k_ptr,  # [max_num_reqs]
    top_p_ptr,  # [max_num_reqs] fp32
    vocab_size,
    CHUNK: tl.constexpr,
    GROUP: tl.constexpr,
    PER_GROUP: tl.constexpr,
    LIST: tl.constexpr,
    TILE: tl.constexpr,
    APPLY_TEMPERATURE: tl.constexpr,
    USE_FP64: tl.constexpr,
):
    """One chunk of a row: its list, floor and best (see the module doc)."""
    req = tl.load(idx_mapping_ptr + token)
    temperature = tl.load(temperature_ptr + req)
    top_k = tl.load(top_k_ptr + req)
    filter_k = (top_k > 0) & (top_k < vocab_size)
    filter_p = tl.load(top_p_ptr + req) < 1.0

    chunk_start = chunk * CHUNK
    logits_row_ptr = logits_ptr + token.to(tl.int64) * logits_row_stride
    out = token.to(tl.int64) * num_chunks + chunk
    score_dtype: tl.constexpr = tl.float64 if USE_FP64 else tl.float32

    if (temperature != 0.0) & ~(filter_k | filter_p):
        # Nothing to filter: this chunk's Gumbel winner, as the Gumbel kernel
        # finds it. Tile by tile, to keep the noise's registers low.
        key = request_key(tl.load(seeds_ptr + req), tl.load(pos_ptr + token))
        best = tl.full([TILE], float("-inf"), score_dtype)
        best_ids = chunk_start + tl.arange(0, TILE)
        for tile in tl.static_range(CHUNK // TILE):
            start = chunk_start + tile * TILE
            tile_ids, _, tile_logits = load_logits_block(
                logits_row_ptr, logits_col_stride, start, temperature, vocab_size,
                1, TILE, APPLY_TEMPERATURE,
            )
            score = tile_logits.to(score_dtype) + gumbel_block(key, start, TILE, USE_FP64)
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
    else:
        # [groups, GROUP]: a group's tokens sit in neighbouring lanes, so the
        # per-group reductions stay within a warp.
        token_ids, in_vocab, x = load_logits_block(
            logits_row_ptr, logits_col_stride, chunk_start, temperature, vocab_size,
            CHUNK // GROUP, GROUP, APPLY_TEMPERATURE,
        )
        if temperature == 0.0:
            # Greedy: the max and its lowest id.
            chunk_max = tl.max(tl.max(x, axis=1), axis=0)
            chunk_argmax = tl.min(
                tl.min(tl.where(x == chunk_max, token_ids, vocab_size), axis=1), axis=0
            )
        else:
            chunk_max, chunk_argmax, floor = _list_largest_per_group(
                x, token_ids, vocab_size, listed_logits_ptr + out * LIST,
                listed_ids_ptr + out * LIST, PER_GROUP,
            )
            tl.store(chunk_floor_ptr + out, floor.to(tl.int32, bitcast=True))
            if filter_p & ~filter_k:
                # Top-p over the whole row needs the row's total mass.
                mass = tl.where(x == chunk_max, 1.0, tl.exp(x - chunk_max))
                mass = tl.where(in_vocab, mass, 0.0)
                tl.store(chunk_mass_ptr + out, tl.sum(tl.sum(mass, axis=1), axis=0))
        # Greedy rows and rows whose max is +-inf are decided by these.
        tl.store(chunk_best_ptr + out, chunk_max.to(score_dtype))
        tl.store(chunk_best_id_ptr + out, chunk_argmax)


@triton.jit
def _list_largest_per_group(
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


@triton.jit
def _top_k_top_p_kernel(
    sampled_ptr,  # [num_tokens] int64
    paths_ptr,  # [num_tokens] int32 or None: which step decided each row
    arrivals_ptr,  # [num_tokens] int32, zero between calls
    chunk_best_ptr,  # [num_tokens, num_chunks] fp32 (fp64 if USE_FP64)
    chunk_best_id_ptr,  # [num_tokens, num_chunks] int32
    chunk_mass_ptr,  # [num_tokens, num_chunks] fp32
    chunk_floor_ptr,  # [num_tokens, num_chunks] int32 (uint32 key bits)
    listed_logits_ptr,  # [num_tokens, num_chunks, LIST] fp32, -inf: no token
    listed_ids_ptr,  # [num_tokens, num_chunks, LIST] int32
    scratch_logits_ptr,  # [num_tokens, WIDE] fp32 scratch
    scratch_ids_ptr,  # [num_tokens, WIDE] int32 scratch
    mass_hist_ptr,  # [num_tokens, 256] int64 scratch of the exact path
    logits_ptr,  # [num_tokens, vocab]
    logits_row_stride,
    logits_col_stride,
    idx_mapping_ptr,  # [num_tokens]
    temperature_ptr,  # [max_num_reqs] fp32
    seeds_ptr,  # [max_num_reqs] int64
    pos_ptr,  # [num_tokens] int64
    top_k_ptr,  # [max_num_reqs]
    top_p_ptr,  # [max_num_reqs] fp32
    vocab_size,
    NUM_CHUNKS: tl.constexpr,
    CHUNKS_BLOCK: tl.constexpr,
    CHUNK: tl.constexpr,
    GROUP: tl.constexpr,
    PER_GROUP: tl.constexpr,
    LIST: tl.constexpr,
    TILE: tl.constexpr,
    SHORT: tl.constexpr,
    WIDE: tl.constexpr,
    ROW_BLOCK: tl.constexpr,
    APPLY_TEMPERATURE: tl.constexpr,
    USE_FP64: tl.constexpr,
    MERGE: tl.constexpr,
):
    # One program per (row, chunk), a row's chunks next to each other in
    # launch order: rows finish, and are merged, while later rows stream in.
    token = tl.program_id(0) // NUM_CHUNKS
    chunk = tl.program_id(0) % NUM_CHUNKS
    _chunk_pass(
        token, chunk, NUM_CHUNKS, chunk_best_ptr, chunk_best_id_ptr, chunk_mass_ptr,
        chunk_floor_ptr, listed_logits_ptr, listed_ids_ptr, logits_ptr, logits_row_stride,
        logits_col_stride, idx_mapping_ptr, temperature_ptr, seeds_ptr, pos_ptr, top_k_ptr,
        top_p_ptr, vocab_size, CHUNK, GROUP, PER_GROUP, LIST, TILE, APPLY_TEMPERATURE, USE_FP64,
    )
    # The row's last chunk to finish merges it: one launch, no host sync.
    # The barrier puts every thread's stores before the releasing atomic;
    # the acquiring side then sees every chunk's results.
    if not MERGE:
        return
    tl.debug_barrier()
    if tl.atomic_add(arrivals_ptr + token, 1, sem="acq_rel") == NUM_CHUNKS - 1:
        # Ready for the next call.
        tl.store(arrivals_ptr + token, 0)
        _merge_row(
            token, sampled_ptr, paths_ptr, chunk_best_ptr, chunk_best_id_ptr, chunk_mass_ptr,
            chunk_floor_ptr, listed_logits_ptr, listed_ids_ptr, scratch_logits_ptr,
            scratch_ids_ptr, mass_hist_ptr, logits_ptr, logits_row_stride, logits_col_stride,
            idx_mapping_ptr, temperature_ptr, seeds_ptr, pos_ptr, top_k_ptr, top_p_ptr,
            vocab_size, NUM_CHUNKS, CHUNKS_BLOCK, LIST, SHORT, WIDE, ROW_BLOCK,
            APPLY_TEMPERATURE, CHUNK, USE_FP64,
        )


@triton.jit
def _merge_kernel(
    sampled_ptr, paths_ptr, chunk_best_ptr, chunk_best_id_ptr, chunk_mass_ptr,
    chunk_floor_ptr, listed_logits_ptr, listed_ids_ptr, scratch_logits_ptr, scratch_ids_ptr,
    mass_hist_ptr, logits_ptr, logits_row_stride, logits_col_stride, idx_mapping_ptr,
    temperature_ptr, seeds_ptr, pos_ptr, top_k_ptr, top_p_ptr, vocab_size,
    NUM_CHUNKS: tl.constexpr, CHUNKS_BLOCK: tl.constexpr, LIST: tl.constexpr,
    SHORT: tl.constexpr, WIDE: tl.constexpr, ROW_BLOCK: tl.constexpr,
    APPLY_TEMPERATURE: tl.constexpr, CHUNK: tl.constexpr, USE_FP64: tl.constexpr,
):
    _merge_row(
        tl.program_id(0), sampled_ptr, paths_ptr, chunk_best_ptr, chunk_best_id_ptr,
        chunk_mass_ptr, chunk_floor_ptr, listed_logits_ptr, listed_ids_ptr, scratch_logits_ptr,
        scratch_ids_ptr, mass_hist_ptr, logits_ptr, logits_row_stride, logits_col_stride,
        idx_mapping_ptr, temperature_ptr, seeds_ptr, pos_ptr, top_k_ptr, top_p_ptr,
        vocab_size, NUM_CHUNKS, CHUNKS_BLOCK, LIST, SHORT, WIDE, ROW_BLOCK,
        APPLY_TEMPERATURE, CHUNK, USE_FP64,
    )


@triton.jit
def _merge_row(
    token,
    sampled_ptr,  # [num_tokens] int64
    paths_ptr,  # [num_tokens] int32 or None: which step decided each row
    chunk_best_ptr,  # [num_tokens, num_chunks] fp32 (fp64 if USE_FP64)
    chunk_best_id_ptr,  # [num_tokens, num_chunks] int32
    chunk_mass_ptr,  # [num_tokens, num_chunks] fp32
    chunk_floor_ptr,  # [num_tokens, num_chunks] int32 (uint32 key bits)
    listed_logits_ptr,  # [num_tokens, num_chunks, LIST] fp32, -inf: no token
    listed_ids_ptr,  # [num_tokens, num_chunks, LIST] int32
    scratch_logits_ptr,  # [num_tokens, WIDE] fp32 scratch
    scratch_ids_ptr,  # [num_tokens, WIDE] int32 scratch
    mass_hist_ptr,  # [num_tokens, 256] int64 scratch of the exact path
    logits_ptr,  # [num_tokens, vocab]
    logits_row_stride,
    logits_col_stride,
    idx_mapping_ptr,  # [num_tokens]
    temperature_ptr,  # [max_num_reqs] fp32
    seeds_ptr,  # [max_num_reqs] int64
    pos_ptr,  # [num_tokens] int64
    top_k_ptr,  # [max_num_reqs]
    top_p_ptr,  # [max_num_reqs] fp32
    vocab_size,
    num_chunks,
    CHUNKS_BLOCK: tl.constexpr,
    LIST: tl.constexpr,
    SHORT: tl.constexpr,
    WIDE: tl.constexpr,
    ROW_BLOCK: tl.constexpr,
    APPLY_TEMPERATURE: tl.constexpr,
    CHUNK: tl.constexpr,
    USE_FP64: tl.constexpr,
):
    """Decide row ``token`` from its chunks' results (see the module doc).

    Everything the row's merge reads is loaded first, before the first
    reduction: the loads' latencies overlap instead of adding up. (Greedy
    and unfiltered rows read their ~20 KB of unwritten lists for nothing:
    cheaper than making the lists wait for the request's settings.)
    """
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
        key = request_key(tl.load(seeds_ptr + req), tl.load(pos_ptr + token))
        logits_row_ptr = logits_ptr + token.to(tl.int64) * logits_row_stride
        scratch_logits_ptr += token.to(tl.int64) * WIDE
        scratch_ids_ptr += token.to(tl.int64) * WIDE
        # Top-p alone needs the row's total mass: the chunks' sums.
        total_mass = 0.0
        if filter_p & ~filter_k:
            chunk_mass = tl.load(chunk_mass_ptr + row + chunks, mask=chunk_ok, other=0.0)
            total_mass = tl.sum(chunk_mass * tl.exp(best.to(tl.float32) - row_max), axis=0)

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
                x, ids, floors, scratch_logits_ptr, scratch_ids_ptr, row_max, capacity,
                filter_k, top_k, filter_p, top_p, total_mass, key, vocab_size,
                SHORT // 2, USE_FP64,
            )
        else:
            short_sampled, decided, bound = sample_short(
                x, ids, floors, scratch_logits_ptr, scratch_ids_ptr, row_max, capacity,
                filter_k, top_k, filter_p, top_p, total_mass, key, vocab_size,
                SHORT, USE_FP64,
            )
        path = PATH_SHORT_LIST
        if decided:
            sampled = short_sampled
        else:
            path = PATH_COLLECTED
            sampled, decided = sample_wide(
                x, ids, floors, logits_row_ptr, logits_col_stride, temperature, vocab_size,
                row_max, filter_k, top_k, filter_p, top_p, total_mass, bound,
                scratch_logits_ptr, scratch_ids_ptr, key, CHUNK, LIST, SHORT, WIDE,
                APPLY_TEMPERATURE, USE_FP64,
            )
        if not decided:
            path = PATH_EXACT
            sampled = sample_row_exactly(
                logits_row_ptr,
                logits_col_stride,
                temperature,
                vocab_size,
                row_max,
                filter_k,
                top_k,
                filter_p,
                top_p,
                mass_hist_ptr + token.to(tl.int64) * 256,
                key,
                ROW_BLOCK,
                APPLY_TEMPERATURE,
                USE_FP64,
            )
        if paths_ptr is not None:
            tl.store(paths_ptr + token, path)
    elif paths_ptr is not None:
        tl.store(paths_ptr + token, PATH_NO_FILTER)
    # Every path keeps the top token, so this never binds; it is here because
    # an id outside the vocabulary would crash the engine.
    tl.store(sampled_ptr + token, tl.minimum(sampled, vocab_size - 1))


def _check_inputs(
    logits: torch.Tensor,
    idx_mapping: torch.Tensor,
    temperature: torch.Tensor,
    seeds: torch.Tensor,
    pos: torch.Tensor,
    top_k: torch.Tensor,
    top_p: torch.Tensor,
) -> None:
    if logits.dim() != 2 or not logits.dtype.is_floating_point:
        raise ValueError(
            f"logits must be a 2-D floating-point tensor, got {logits.dim()}-D "
            f"{logits.dtype}"
        )
    num_tokens, vocab_size = logits.shape
    if vocab_size > MAX_VOCAB_SIZE:
        raise ValueError(
            f"logits has {vocab_size} columns; the top-k/top-p kernel supports "
            f"vocabularies of at most {MAX_VOCAB_SIZE} tokens"
        )
    for name, tensor in (("idx_mapping", idx_mapping), ("pos", pos)):
        if tensor.dim() != 1 or tensor.shape[0] != num_tokens:
            raise ValueError(
                f"{name} must have shape [{num_tokens}] (one entry per logits row), "
                f"got {tuple(tensor.shape)}"
            )
    per_request = {
        "temperature": (temperature, (torch.float32,)),
        "seeds": (seeds, (torch.int64,)),
        "top_k": (top_k, (torch.int32, torch.int64)),
        "top_p": (top_p, (torch.float32,)),
    }
    for name, (tensor, dtypes) in per_request.items():
        if tensor.dim() != 1 or tensor.shape != temperature.shape:
            raise ValueError(
                f"{name} must be 1-D with one entry per request slot like "
                f"temperature {tuple(temperature.shape)}, got {tuple(tensor.shape)}"
            )
        if tensor.dtype not in dtypes:
            raise ValueError(f"{name} must be {' or '.join(map(str, dtypes))}, got {tensor.dtype}")
    if idx_mapping.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"idx_mapping must be int32 or int64, got {idx_mapping.dtype}")
    if pos.dtype != torch.int64:
        raise ValueError(f"pos must be int64, got {pos.dtype}")
    tensors = {
        "idx_mapping": idx_mapping,
        "temperature": temperature,
        "seeds": seeds,
        "pos": pos,
        "top_k": top_k,
        "top_p": top_p,
    }
    for name, tensor in tensors.items():
        if tensor.device != logits.device:
            raise ValueError(
                f"{name} is on {tensor.device} but logits are on {logits.device}"
            )


@functools.cache
def _check_tuning(tuning: TopKTopPTuning) -> None:
    for name in ("chunk", "group", "per_group", "short_list", "wide_list", "row_block"):
        value = getattr(tuning, name)
        if value < 2 or triton.next_power_of_2(value) != value:
            raise ValueError(f"tuning.{name} must be a power of two >= 2, got {value}")
    if not 4 <= tuning.group * 2 <= tuning.chunk:
        raise ValueError(
            f"tuning.group ({tuning.group}) must be at most half of tuning.chunk "
            f"({tuning.chunk})"
        )
    if tuning.per_group > tuning.group:
        raise ValueError(
            f"tuning.per_group ({tuning.per_group}) must be at most tuning.group "
            f"({tuning.group})"
        )
    if tuning.wide_list < tuning.short_list:
        raise ValueError(
            f"tuning.wide_list ({tuning.wide_list}) must be at least tuning.short_list "
            f"({tuning.short_list})"
        )


@dataclasses.dataclass(frozen=True)
class _LaunchShape:
    chunk: int
    group: int
    per_group: int
    num_chunks: int


def _launch_shape(vocab_size: int, tuning: TopKTopPTuning) -> _LaunchShape:
    """From the vocabulary size only (never the batch): tokens are batch invariant."""
    if vocab_size <= tuning.short_list:
        # One chunk of pairs lists every token: the row is decided from the lists.
        chunk = max(triton.next_power_of_2(vocab_size), 4)
        return _LaunchShape(chunk=chunk, group=2, per_group=2, num_chunks=1)
    chunk = min(tuning.chunk, triton.next_power_of_2(vocab_size))
    group = min(tuning.group, chunk // 2)
    return _LaunchShape(
        chunk=chunk,
        group=group,
        per_group=min(tuning.per_group, group),
        num_chunks=triton.cdiv(vocab_size, chunk),
    )


@dataclasses.dataclass
class _Workspace:
    """The kernels' scratch for up to ``capacity`` rows of one launch shape.

    Rows are laid out at multiples of their own size, so a workspace serves
    every call of at most ``capacity`` rows as it is: a call allocates only
    its output. ``arrivals`` starts at zero and the last chunk of each row
    sets its counter back to zero.
    """

    capacity: int
    arrivals: torch.Tensor  # [capacity] int32
    chunk_best: torch.Tensor  # [capacity, num_chunks] fp32 (fp64 if use_fp64)
    chunk_best_id: torch.Tensor  # [capacity, num_chunks] int32
    chunk_mass: torch.Tensor  # [capacity, num_chunks] fp32
    chunk_floor: torch.Tensor  # [capacity, num_chunks] int32
    listed_logits: torch.Tensor  # [capacity, num_chunks, list_len] fp32
    listed_ids: torch.Tensor  # [capacity, num_chunks, list_len] int32
    # The short list and, for the rare wide rows, the collected tokens.
    scratch_logits: torch.Tensor  # [capacity, wide_list] fp32
    scratch_ids: torch.Tensor  # [capacity, wide_list] int32
    mass_hist: torch.Tensor  # [capacity, RADIX_BINS] int64, the exact path's

    @classmethod
    def allocate(cls, capacity, device, num_chunks, list_len, wide_list, use_fp64):
        def empty(*shape, dtype=torch.int32):
            return torch.empty((capacity, *shape), dtype=dtype, device=device)

        return cls(
            capacity=capacity,
            arrivals=torch.zeros(capacity, dtype=torch.int32, device=device),
            chunk_best=empty(num_chunks, dtype=torch.float64 if use_fp64 else torch.float32),
            chunk_best_id=empty(num_chunks),
            chunk_mass=empty(num_chunks, dtype=torch.float32),
            chunk_floor=empty(num_chunks),
            listed_logits=empty(num_chunks, list_len, dtype=torch.float32),
            listed_ids=empty(num_chunks, list_len),
            scratch_logits=empty(wide_list, dtype=torch.float32),
            scratch_ids=empty(wide_list),
            mass_hist=empty(RADIX_BINS, dtype=torch.int64),
        )


# Workspaces by (device, num_chunks, list_len, wide_list, use_fp64), newest
# last. They grow by doubling and are never freed: a CUDA graph may hold the
# address of an older one. Calls that share a device must run in stream
# order (as the V2 runner's sampler does): concurrent calls on two streams
# would share one workspace.
_WORKSPACES: dict[tuple, list[_Workspace]] = {}


def _workspace(device, num_tokens, num_chunks, list_len, wide_list, use_fp64) -> _Workspace:
    kept = _WORKSPACES.setdefault((device, num_chunks, list_len, wide_list, use_fp64), [])
    if not kept or kept[-1].capacity < num_tokens:
        capacity = max(num_tokens, 2 * kept[-1].capacity if kept else 64)
        kept.append(
            _Workspace.allocate(capacity, device, num_chunks, list_len, wide_list, use_fp64)
        )
    return kept[-1]


def top_k_top_p_sample(
    logits: torch.Tensor,  # [num_tokens, vocab_size]
    idx_mapping: torch.Tensor,  # [num_tokens]
    temperature: torch.Tensor,  # [max_num_reqs]
    seeds: torch.Tensor,  # [max_num_reqs]
    pos: torch.Tensor,  # [num_tokens]
    top_k: torch.Tensor,  # [max_num_reqs]
    top_p: torch.Tensor,  # [max_num_reqs]
    *,
    apply_temperature: bool,
    use_fp64: bool = False,
    tuning: TopKTopPTuning = DEFAULT_TUNING,
    paths_out: torch.Tensor | None = None,  # [num_tokens] int32
) -> torch.Tensor:
    r"""Sample one token per row under top-k and top-p, by fused Gumbel-max.

    The runner-facing entry point: per-request values are read through
    ``idx_mapping`` from vLLM's state tensors, like :func:`ops.gumbel.gumbel_sample`.

    Row ``i`` (request slot ``r = idx_mapping[i]``) is drawn from
    ``softmax(logits[i] / temperature[r])`` restricted first to the tokens
    whose logit is at least the ``top_k[r]``-th largest, then to the tokens
    whose probability mass strictly above them (within that top-k set,
    renormalised) is below ``top_p[r]``. Tied logits are kept or dropped
    together at both thresholds, and the top token is always kept.

    Parameters
    ----------
    logits : torch.Tensor
        ``[num_tokens, vocab_size]``, float32 (bfloat16/float16 are read as
        float32). Rows may be padded (``logits.stride(0) >= vocab_size``).
        NaN counts as -inf.
    idx_mapping : torch.Tensor
        ``[num_tokens]`` int32 or int64: the request-state slot of each row.
    temperature : torch.Tensor
        ``[max_num_reqs]`` float32. ``0`` means greedy: the argmax, lowest id
        on ties, whatever top-k/top-p say.
    seeds : torch.Tensor
        ``[max_num_reqs]`` int64.
    pos : torch.Tensor
        ``[num_tokens]`` int64: with ``seeds`` it fixes the row's noise, so
        the token is a pure function of (row, temperature, top_k, top_p,
        seed, pos): independent of the batch and of the other rows.
    top_k : torch.Tensor
        ``[max_num_reqs]`` int32 or int64; ``<= 0`` or ``>= vocab_size`` is
        off (vLLM stores ``vocab_size``).
    top_p : torch.Tensor
        ``[max_num_reqs]`` float32; ``>= 1`` is off.
    apply_temperature : bool
        Divide the logits by the temperature here (fp32 ``/``, as
        ``gumbel_sample`` does). ``False`` when they were already divided
        (vLLM's sampler); the temperature then only marks greedy rows.
    use_fp64 : bool
        FP64 Gumbel noise and scores (``--use-fp64-gumbel``). The masks are
        computed in FP32 either way.
    tuning : TopKTopPTuning
        Launch shape. Tokens agree across tunings except where a probability
        sum lands within float rounding of a top-p boundary.
    paths_out : torch.Tensor, optional
        ``[num_tokens]`` int32, for diagnostics: receives which step decided
        each row (0: greedy, unfiltered or an infinite max; 1: the short list;
        2: the walk that collects the row from a bound up; 3: the exact
        whole-row path). See ``docs/ops-topk-topp.md``.

    Returns
    -------
    torch.Tensor
        ``[num_tokens]`` int64, every id in ``[0, vocab_size)``. The token is
        the one ``gumbel_sample`` picks on the row with the filtered tokens
        set to ``-inf``: a ``+inf`` logit wins (the lowest id among several),
        an all ``-inf``/NaN row gives ``0``.

    Examples
    --------
    >>> logits = torch.randn(3, 151936, device="cuda")
    >>> slots = torch.arange(3, dtype=torch.int32, device="cuda")
    >>> temperature = torch.tensor([0.0, 0.7, 1.0], device="cuda")
    >>> seeds = torch.tensor([1, 2, 3], device="cuda")
    >>> pos = torch.tensor([10, 10, 11], device="cuda")
    >>> top_k = torch.tensor([50, 50, 151936], dtype=torch.int32, device="cuda")
    >>> top_p = torch.tensor([0.9, 1.0, 0.9], device="cuda")
    >>> top_k_top_p_sample(logits, slots, temperature, seeds, pos, top_k, top_p,
    ...                    apply_temperature=True)
    tensor([...], device='cuda:0')  # [3] int64; row 0 is the argmax
    """
    _check_inputs(logits, idx_mapping, temperature, seeds, pos, top_k, top_p)
    _check_tuning(tuning)
    if paths_out is not None and (
        paths_out.shape != (logits.shape[0],)
        or paths_out.dtype != torch.int32
        or paths_out.device != logits.device
    ):
        raise ValueError(
            f"paths_out must be a [{logits.shape[0]}] int32 tensor on {logits.device}, got "
            f"{tuple(paths_out.shape)} {paths_out.dtype} on {paths_out.device}"
        )
    num_tokens, vocab_size = logits.shape
    device = logits.device
    if num_tokens == 0:
        return torch.empty(0, dtype=torch.int64, device=device)
    shape = _launch_shape(vocab_size, tuning)
    # Listed tokens per chunk.
    list_len = shape.per_group * shape.chunk // shape.group
    work = _workspace(
        device, num_tokens, shape.num_chunks, list_len, tuning.wide_list, use_fp64
    )
    sampled = torch.empty(num_tokens, dtype=torch.int64, device=device)

    fused = num_tokens * shape.num_chunks <= tuning.fused_max_programs
    buffers = (
        work.chunk_best, work.chunk_best_id, work.chunk_mass, work.chunk_floor,
        work.listed_logits, work.listed_ids, work.scratch_logits, work.scratch_ids,
        work.mass_hist, logits, logits.stride(0), logits.stride(1),
        idx_mapping, temperature, seeds, pos, top_k, top_p, vocab_size,
    )
    merge_shape = dict(
        NUM_CHUNKS=shape.num_chunks,
        CHUNKS_BLOCK=triton.next_power_of_2(shape.num_chunks),
        LIST=list_len,
        SHORT=tuning.short_list,
        WIDE=tuning.wide_list,
        ROW_BLOCK=tuning.row_block,
        APPLY_TEMPERATURE=apply_temperature,
        CHUNK=shape.chunk,
        USE_FP64=use_fp64,
    )
    _top_k_top_p_kernel[(num_tokens * shape.num_chunks,)](
        sampled,
        paths_out,
        work.arrivals,
        *buffers,
        **merge_shape,
        GROUP=shape.group,
        PER_GROUP=shape.per_group,
        TILE=min(shape.chunk, GUMBEL_TILE),
        MERGE=fused,
        num_warps=tuning.num_warps,
    )
    if not fused:
        _merge_kernel[(num_tokens,)](
            sampled, paths_out, *buffers, **merge_shape, num_warps=tuning.merge_warps
        )
    return sampled
