"""Fused top-k/top-p sampling: mask and Gumbel-max draw without sorting.

Row ``i`` is drawn from ``softmax(logits[i] / T)`` restricted first to its
top-k tokens and then to the top-p set of that renormalised distribution, by
Gumbel-max with the noise of ``ops/random.py``: the token equals what the
plain Gumbel kernel (``ops/gumbel.py``) picks on the masked row. Every
threshold is an exact search on order keys (``topk_topp_select.py``), so ties
at a threshold are kept or dropped together. ``docs/ops-topk-topp.md`` has
the algorithm and its cost.

Two kernels, and no host synchronisation:

1. ``_chunk_kernel``, one program per (row, chunk of ``CHUNK`` tokens), reads
   the logits once. It writes the chunk's max and argmax, and lists the
   chunk's ``CAPACITY`` largest logits with their ids together with the
   chunk's *floor*: every token it did not list has a key at or below the
   floor. Rows without top-k/top-p draw their chunk's Gumbel winner instead.
2. ``_row_kernel``, one program per row, merges the lists. Above the highest
   floor the lists hold every token of the row, so when the thresholds
   found on the lists lie above it (always, for top_k <= CAPACITY without
   heavy ties) they are the row's thresholds, and the row is drawn from the
   lists: Gumbel noise for a few hundred tokens only. Otherwise the program
   finishes the row on the exact whole-row path (``topk_topp_exact.py``).
"""

from __future__ import annotations

import dataclasses
import functools

import torch
import triton
import triton.language as tl

from vllm_sampling_plugin.ops.random import gumbel_block, request_key
from vllm_sampling_plugin.ops.topk_topp_exact import MAX_VOCAB_SIZE, sample_row_exactly
from vllm_sampling_plugin.ops.topk_topp_select import (
    NEG_INF_KEY,
    RADIX_BINS,
    buckets_within,
    distance_bucket,
    gumbel_at,
    load_logits_block,
    order_key,
)


@dataclasses.dataclass(frozen=True)
class TopKTopPTuning:
    """Launch shape. It depends on the vocabulary only (never on the batch),
    so a row's arithmetic, and thus its token, is batch invariant."""

    # Tokens per program of the first kernel (power of two).
    chunk: int = 4096
    # Tokens each chunk lists (power of two). Rows with top_k <= capacity
    # resolve from the lists unless ties at a chunk's floor push it up.
    capacity: int = 64
    # The row kernel keeps the row's `short_list` largest listed tokens and
    # compares them pairwise (power of two). Rows with top_k <= short_list
    # resolve unless ties push the floor up.
    short_list: int = 128
    chunk_warps: int = 8
    row_warps: int = 8
    # Tokens per loop step of the exact whole-row path (power of two).
    row_block: int = 2048


DEFAULT_TUNING = TopKTopPTuning()
# Buckets of the histogram that chooses what a chunk (or the short list) keeps.
NUM_BUCKETS = tl.constexpr(32)


@triton.jit
def _chunk_kernel(
    chunk_best_ptr,  # [num_tokens, num_chunks] fp32 (fp64 if USE_FP64)
    chunk_best_id_ptr,  # [num_tokens, num_chunks] int32
    chunk_mass_ptr,  # [num_tokens, num_chunks] fp32
    chunk_floor_ptr,  # [num_tokens, num_chunks] int32 (uint32 key bits)
    num_listed_ptr,  # [num_tokens, num_chunks] int32
    listed_logits_ptr,  # [num_tokens, num_chunks, CAPACITY] fp32
    listed_ids_ptr,  # [num_tokens, num_chunks, CAPACITY] int32
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
    CAPACITY: tl.constexpr,
    APPLY_TEMPERATURE: tl.constexpr,
    USE_FP64: tl.constexpr,
):
    token = tl.program_id(0)
    chunk = tl.program_id(1)
    req = tl.load(idx_mapping_ptr + token)
    temperature = tl.load(temperature_ptr + req)
    top_k = tl.load(top_k_ptr + req)
    filter_k = (top_k > 0) & (top_k < vocab_size)
    filter_p = tl.load(top_p_ptr + req) < 1.0

    chunk_start = chunk * CHUNK
    token_ids, in_vocab, x = load_logits_block(
        logits_ptr + token.to(tl.int64) * logits_row_stride,
        logits_col_stride,
        chunk_start,
        temperature,
        vocab_size,
        CHUNK,
        APPLY_TEMPERATURE,
    )
    out = token.to(tl.int64) * tl.num_programs(1) + chunk
    score_dtype: tl.constexpr = tl.float64 if USE_FP64 else tl.float32

    if (temperature != 0.0) & ~(filter_k | filter_p):
        # Nothing to filter: this chunk's Gumbel winner, as the Gumbel kernel.
        key = request_key(tl.load(seeds_ptr + req), tl.load(pos_ptr + token))
        score = x.to(score_dtype) + gumbel_block(key, chunk_start, CHUNK, USE_FP64)
        best = tl.max(score, axis=0)
        tl.store(chunk_best_ptr + out, best)
        tl.store(
            chunk_best_id_ptr + out,
            tl.min(tl.where(score == best, token_ids, vocab_size), axis=0),
        )
    else:
        # The max and its lowest id: greedy rows and rows with an infinite
        # max need nothing else, the others need the max for their masses.
        chunk_max = tl.max(x, axis=0)
        tl.store(chunk_best_ptr + out, chunk_max.to(score_dtype))
        tl.store(
            chunk_best_id_ptr + out,
            tl.min(tl.where(x == chunk_max, token_ids, vocab_size), axis=0),
        )
        if temperature != 0.0:
            if filter_p & ~filter_k:
                # Top-p over the whole row needs the row's total mass.
                mass = tl.where(x == chunk_max, 1.0, tl.exp(x - chunk_max))
                tl.store(chunk_mass_ptr + out, tl.sum(tl.where(in_vocab, mass, 0.0), axis=0))
            listed, floor = _list_largest(x, in_vocab, chunk_max, CAPACITY)
            slot = out * CAPACITY + tl.cumsum(listed.to(tl.int32), axis=0) - 1
            tl.store(listed_logits_ptr + slot, x, mask=listed)
            tl.store(listed_ids_ptr + slot, token_ids, mask=listed)
            tl.store(num_listed_ptr + out, tl.sum(listed.to(tl.int32), axis=0))
            tl.store(chunk_floor_ptr + out, floor.to(tl.int32, bitcast=True))


@triton.jit
def _list_largest(x, valid, top, capacity):
    """At most ``capacity`` of the largest valid ``x``, and the key of the
    largest valid value left out (0 if none): every value above it is listed.

    The cut is chosen on a 32-bucket histogram of ``top - x`` scaled to the
    distance between ``top`` and the mean of the finite values: one cheap
    pass that adapts to the temperature. Only the floor must be exact.
    """
    finite = valid & (x > float("-inf")) & (x < float("inf"))
    mean = tl.sum(tl.where(finite, x, 0.0), axis=0) / tl.sum(finite.to(tl.float32), axis=0)
    bucket = distance_bucket(x, top, NUM_BUCKETS / (top - mean), NUM_BUCKETS)
    hist = tl.histogram(bucket, NUM_BUCKETS, mask=valid)
    listed = valid & (bucket < buckets_within(hist, capacity))
    left_out = tl.max(tl.where(valid & ~listed, x, float("-inf")), axis=0)
    floor = tl.where(tl.sum((valid & ~listed).to(tl.int32), axis=0) > 0, order_key(left_out), 0)
    return listed, floor


@triton.jit
def _short_list(
    listed_logits_ptr,  # [num_tokens, num_chunks, CAPACITY] fp32
    listed_ids_ptr,  # [num_tokens, num_chunks, CAPACITY] int32
    num_listed_ptr,  # [num_tokens, num_chunks] int32
    chunk_floor_ptr,  # [num_tokens, num_chunks] int32 (uint32 key bits)
    short_logits_ptr,  # [SHORT] fp32 scratch of this row
    short_ids_ptr,  # [SHORT] int32 scratch of this row
    row,
    row_max,
    num_chunks,
    CHUNKS_BLOCK: tl.constexpr,
    CAPACITY: tl.constexpr,
    SHORT: tl.constexpr,
):
    """The row's largest listed logits (at most ``SHORT``), their ids, and
    the floor: the list holds every token of the row whose key is above it."""
    chunks = tl.arange(0, CHUNKS_BLOCK)
    floors = tl.load(chunk_floor_ptr + row + chunks, mask=chunks < num_chunks, other=0)
    floor = tl.max(floors.to(tl.uint32, bitcast=True), axis=0)
    lanes = tl.arange(0, CHUNKS_BLOCK * CAPACITY)
    lane_chunk = lanes // CAPACITY
    num_listed = tl.load(num_listed_ptr + row + lane_chunk, mask=lane_chunk < num_chunks, other=0)
    listed = lanes % CAPACITY < num_listed
    x = tl.load(listed_logits_ptr + row * CAPACITY + lanes, mask=listed, other=float("-inf"))
    ids = tl.load(listed_ids_ptr + row * CAPACITY + lanes, mask=listed, other=0)
    keys = tl.where(listed, order_key(x), 0)
    if CHUNKS_BLOCK * CAPACITY > SHORT:
        # Keep at most SHORT of the largest, raise the floor to the largest
        # left out, and compact the kept ones through the scratch.
        chosen = listed
        if tl.sum(listed.to(tl.int32), axis=0) > SHORT:
            chosen, cut = _list_largest(x, listed, row_max, SHORT)
            floor = tl.maximum(floor, cut)
        slot = tl.cumsum(chosen.to(tl.int32), axis=0) - 1
        tl.store(short_logits_ptr + slot, x, mask=chosen)
        tl.store(short_ids_ptr + slot, ids, mask=chosen)
        tl.debug_barrier()
        short_lanes = tl.arange(0, SHORT)
        listed = short_lanes < tl.sum(chosen.to(tl.int32), axis=0)
        x = tl.load(short_logits_ptr + short_lanes, mask=listed, other=float("-inf"))
        ids = tl.load(short_ids_ptr + short_lanes, mask=listed, other=0)
        keys = tl.where(listed, order_key(x), 0)
    return x, ids, keys, listed, floor


@triton.jit
def _row_kernel(
    sampled_ptr,  # [num_tokens] int64
    chunk_best_ptr,  # [num_tokens, num_chunks] fp32 (fp64 if USE_FP64)
    chunk_best_id_ptr,  # [num_tokens, num_chunks] int32
    chunk_mass_ptr,  # [num_tokens, num_chunks] fp32
    chunk_floor_ptr,  # [num_tokens, num_chunks] int32 (uint32 key bits)
    num_listed_ptr,  # [num_tokens, num_chunks] int32
    listed_logits_ptr,  # [num_tokens, num_chunks, CAPACITY] fp32
    listed_ids_ptr,  # [num_tokens, num_chunks, CAPACITY] int32
    short_logits_ptr,  # [num_tokens, SHORT] fp32 scratch
    short_ids_ptr,  # [num_tokens, SHORT] int32 scratch
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
    CAPACITY: tl.constexpr,
    SHORT: tl.constexpr,
    ROW_BLOCK: tl.constexpr,
    APPLY_TEMPERATURE: tl.constexpr,
    USE_FP64: tl.constexpr,
):
    token = tl.program_id(0)
    req = tl.load(idx_mapping_ptr + token)
    temperature = tl.load(temperature_ptr + req)
    top_k = tl.load(top_k_ptr + req)
    top_p = tl.load(top_p_ptr + req)
    filter_k = (top_k > 0) & (top_k < vocab_size)
    filter_p = top_p < 1.0
    # Where it matters (filter_k), top_k < vocab_size fits in int32.
    top_k = top_k.to(tl.int32)
    score_dtype: tl.constexpr = tl.float64 if USE_FP64 else tl.float32

    chunks = tl.arange(0, CHUNKS_BLOCK)
    chunk_ok = chunks < num_chunks
    row = token.to(tl.int64) * num_chunks
    best = tl.load(chunk_best_ptr + row + chunks, mask=chunk_ok, other=float("-inf"))
    row_best = tl.max(best, axis=0)
    # Chunks are in token order: the lowest id among equal bests is the
    # first chunk's. An all -inf row gives chunk 0's id, 0.
    best_ids = tl.load(chunk_best_id_ptr + row + chunks, mask=chunk_ok, other=vocab_size)
    sampled = tl.min(tl.where(chunk_ok & (best == row_best), best_ids, vocab_size), axis=0)

    row_max = row_best.to(tl.float32)
    finite_max = (row_max != float("inf")) & (row_max != float("-inf"))
    # Greedy and unfiltered rows are decided. So is a row whose max is
    # +inf (only +inf tokens can win: the first of them, as the Gumbel
    # kernel picks) or -inf (all tokens are -inf: token 0).
    if (temperature != 0.0) & (filter_k | filter_p) & finite_max:
        key = request_key(tl.load(seeds_ptr + req), tl.load(pos_ptr + token))
        x, ids, keys, listed, floor = _short_list(
            listed_logits_ptr,
            listed_ids_ptr,
            num_listed_ptr,
            chunk_floor_ptr,
            short_logits_ptr + token.to(tl.int64) * SHORT,
            short_ids_ptr + token.to(tl.int64) * SHORT,
            row,
            row_max,
            num_chunks,
            CHUNKS_BLOCK,
            CAPACITY,
            SHORT,
        )
        # above[j, i]: listed token i has a strictly larger logit than j.
        above = (keys[None, :] > keys[:, None]) & listed[None, :]
        keep = listed
        if filter_k:
            # Kept iff fewer than k tokens are strictly larger: all ties stay.
            keep = listed & (tl.sum(above.to(tl.int32), axis=1) < top_k)
        mass = tl.where(keep, tl.exp(x - row_max), 0.0)
        if filter_k:
            total_mass = tl.sum(mass, axis=0)
        else:
            chunk_mass = tl.load(chunk_mass_ptr + row + chunks, mask=chunk_ok, other=0.0)
            chunk_max = best.to(tl.float32)
            total_mass = tl.sum(chunk_mass * tl.exp(chunk_max - row_max), axis=0)
        top_p_mass = top_p * total_mass
        if filter_p:
            # Kept iff the mass strictly above it is below p: all ties stay.
            mass_above = tl.sum(tl.where(above, mass[None, :], 0.0), axis=1)
            keep = keep & (mass_above < top_p_mass)
        # The top token always stays, even for top_p <= 0.
        keep = keep | (listed & (keys == order_key(row_max)))

        # The counts and masses above are the row's for every token above
        # the floor. They decide the row when the cut falls above it: at
        # least k listed tokens (top-k), or at least p of the mass (top-p
        # alone), lie above the floor. Below a floor of -inf lie only -inf
        # tokens, which cannot win.
        above_floor = listed & (keys > floor)
        if filter_k:
            decided = tl.sum(above_floor.to(tl.int32), axis=0) >= top_k
        else:
            mass_above_floor = tl.sum(tl.where(above_floor, mass, 0.0), axis=0)
            decided = (mass_above_floor >= top_p_mass) & (mass_above_floor > 0.0)
        if decided | (floor <= NEG_INF_KEY):
            score = x.to(score_dtype) + gumbel_at(key, ids, USE_FP64)
            score = tl.where(keep, score, float("-inf"))
            top = tl.max(score, axis=0)
            sampled = tl.min(tl.where(keep & (score == top), ids, vocab_size), axis=0)
        else:
            sampled = sample_row_exactly(
                logits_ptr + token.to(tl.int64) * logits_row_stride,
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
    tl.store(sampled_ptr + token, sampled)


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
    for name in ("chunk", "capacity", "short_list", "row_block"):
        value = getattr(tuning, name)
        if value < 4 or triton.next_power_of_2(value) != value:
            raise ValueError(f"tuning.{name} must be a power of two >= 4, got {value}")
    if tuning.capacity >= tuning.chunk:
        raise ValueError(
            f"tuning.capacity ({tuning.capacity}) must be below tuning.chunk "
            f"({tuning.chunk})"
        )


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
    num_tokens, vocab_size = logits.shape
    device = logits.device
    if num_tokens == 0:
        return torch.empty(0, dtype=torch.int64, device=device)
    chunk = min(tuning.chunk, max(triton.next_power_of_2(vocab_size), 2 * tuning.capacity))
    num_chunks = triton.cdiv(vocab_size, chunk)
    per_chunk = (num_tokens, num_chunks)
    chunk_best = torch.empty(
        per_chunk, dtype=torch.float64 if use_fp64 else torch.float32, device=device
    )
    chunk_best_id = torch.empty(per_chunk, dtype=torch.int32, device=device)
    chunk_mass = torch.empty(per_chunk, dtype=torch.float32, device=device)
    chunk_floor = torch.empty(per_chunk, dtype=torch.int32, device=device)
    num_listed = torch.empty(per_chunk, dtype=torch.int32, device=device)
    listed_logits = torch.empty(
        (num_tokens, num_chunks, tuning.capacity), dtype=torch.float32, device=device
    )
    listed_ids = torch.empty(
        (num_tokens, num_chunks, tuning.capacity), dtype=torch.int32, device=device
    )
    short_logits = torch.empty((num_tokens, tuning.short_list), dtype=torch.float32, device=device)
    short_ids = torch.empty((num_tokens, tuning.short_list), dtype=torch.int32, device=device)
    mass_hist = torch.empty((num_tokens, RADIX_BINS), dtype=torch.int64, device=device)
    sampled = torch.empty(num_tokens, dtype=torch.int64, device=device)
    state = (idx_mapping, temperature, seeds, pos, top_k, top_p)

    _chunk_kernel[per_chunk](
        chunk_best,
        chunk_best_id,
        chunk_mass,
        chunk_floor,
        num_listed,
        listed_logits,
        listed_ids,
        logits,
        logits.stride(0),
        logits.stride(1),
        *state,
        vocab_size,
        CHUNK=chunk,
        CAPACITY=tuning.capacity,
        APPLY_TEMPERATURE=apply_temperature,
        USE_FP64=use_fp64,
        num_warps=tuning.chunk_warps,
    )
    _row_kernel[(num_tokens,)](
        sampled,
        chunk_best,
        chunk_best_id,
        chunk_mass,
        chunk_floor,
        num_listed,
        listed_logits,
        listed_ids,
        short_logits,
        short_ids,
        mass_hist,
        logits,
        logits.stride(0),
        logits.stride(1),
        *state,
        vocab_size,
        num_chunks,
        CHUNKS_BLOCK=triton.next_power_of_2(num_chunks),
        CAPACITY=tuning.capacity,
        SHORT=tuning.short_list,
        ROW_BLOCK=tuning.row_block,
        APPLY_TEMPERATURE=apply_temperature,
        USE_FP64=use_fp64,
        num_warps=tuning.row_warps,
    )
    return sampled
