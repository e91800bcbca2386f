"""Gumbel-max sampling: one token per row of logits.

``argmax(logits / temperature + g)`` with ``g`` i.i.d. Gumbel(0, 1) noise is
an exact draw from ``softmax(logits / temperature)``. The noise comes from
``ops/random.py`` and depends only on (seed, position, token id), so a row's
token never depends on its batch, its row, or how the vocabulary is split
into programs here.

Two stages. Stage 1 splits each row into chunks of ``tiles_per_chunk`` tiles;
one program walks a chunk tile by tile, keeping a running best per lane (no
reduction inside the loop), and writes the chunk's (max score, lowest token id
with that score). Stage 2, one tiny program per row, reduces the chunks. A row
that fits in one chunk skips stage 2.

Ties, NaN and infinities are decided by one rule, applied in both stages:
a candidate replaces the current best only if its score is *strictly*
greater. So among equal maxima the lowest token id wins (like
``torch.argmax``), NaN never wins (it compares false), ``+inf`` beats every
finite score, and a row whose logits are all ``-inf`` or NaN yields token 0.
"""

import torch
import triton
import triton.language as tl

from ..checks import check_same_device
from ..host_math import next_power_of_2
from ..random import FP64_PHILOX, gumbel_block, noise_code, request_key
from .plan import plan_launch


@triton.jit
def _chunk_argmax(
    logits_row_ptr,  # [vocab]: one row of logits
    logits_col_stride,
    processed_logits_ptr,  # [max_num_reqs, vocab] or None
    processed_row_offset,
    key,
    temperature,
    chunk_start,
    num_tiles,
    vocab_size,
    TILE: tl.constexpr,
    DIVIDE: tl.constexpr,
    ADD_NOISE: tl.constexpr,
    NOISE: tl.constexpr,
):
    """(max score, lowest token id with that score) over one chunk."""
    score_dtype: tl.constexpr = tl.float64 if (NOISE >= FP64_PHILOX and ADD_NOISE) else tl.float32
    lanes = tl.arange(0, TILE)
    best = tl.full([TILE], float("-inf"), score_dtype)
    # Each lane remembers the tile of its best score (cheaper than the token
    # id). Starting at tile 0, a chunk where nothing beats -inf (all -inf or
    # NaN) answers lane 0 of tile 0: ``chunk_start``, a valid id.
    best_tile = tl.zeros([TILE], tl.int32)
    for t in range(num_tiles):
        # int32 token ids: the FP64 noise offsets must have stock vLLM's dtype.
        start = chunk_start + t * TILE
        token_ids = start + lanes
        in_vocab = token_ids < vocab_size
        logits = tl.load(
            logits_row_ptr + token_ids * logits_col_stride,
            mask=in_vocab,
            other=float("-inf"),
        ).to(tl.float32)
        if DIVIDE:
            # Same fp32 ``/`` as stock vLLM, so FP64 mode matches it bit for bit.
            logits = logits / temperature
        if processed_logits_ptr is not None:
            tl.store(
                processed_logits_ptr + processed_row_offset + token_ids,
                logits,
                mask=in_vocab,
            )
        score = logits.to(score_dtype)
        if ADD_NOISE:
            score += gumbel_block(key, start, TILE, NOISE)
        # Strictly greater: earlier tokens keep ties, NaN never enters.
        wins = score > best
        best = tl.where(wins, score, best)
        best_tile = tl.where(wins, t, best_tile)
    chunk_max = tl.max(best, axis=0)
    best_ids = chunk_start + best_tile * TILE + lanes
    chunk_argmax = tl.min(tl.where(best == chunk_max, best_ids, vocab_size), axis=0)
    return chunk_max.to(tl.float64 if NOISE >= FP64_PHILOX else tl.float32), chunk_argmax


@triton.jit
def _gumbel_partial_kernel(
    partial_max_ptr,  # [num_tokens, num_chunks] fp32 (fp64 for FP64 noise)
    partial_ids_ptr,  # [num_tokens, num_chunks] int64
    processed_logits_ptr,  # [max_num_reqs, vocab] or None
    processed_logits_stride,
    logits_ptr,  # [num_tokens, vocab]
    logits_row_stride,
    logits_col_stride,
    idx_mapping_ptr,  # [num_tokens]
    temperature_ptr,  # [max_num_reqs] fp32
    seeds_ptr,  # [max_num_reqs] int64
    pos_ptr,  # [num_tokens] int64
    vocab_size,
    tiles_per_chunk,
    TILE: tl.constexpr,
    APPLY_TEMPERATURE: tl.constexpr,
    NOISE: tl.constexpr,
):
    token = tl.program_id(0)
    chunk = tl.program_id(1)
    num_chunks = tl.num_programs(1)
    req = tl.load(idx_mapping_ptr + token)
    temperature = tl.load(temperature_ptr + req).to(tl.float32)

    chunk_start = chunk * tiles_per_chunk * TILE
    num_tiles = tl.minimum(tiles_per_chunk, tl.cdiv(vocab_size - chunk_start, TILE))
    logits_row_ptr = logits_ptr + token.to(tl.int64) * logits_row_stride
    processed_row_offset = req.to(tl.int64) * processed_logits_stride

    # One branch per row, outside the loop: greedy rows skip the noise.
    if temperature != 0.0:
        key = request_key(tl.load(seeds_ptr + req), tl.load(pos_ptr + token), NOISE)
        chunk_max, chunk_argmax = _chunk_argmax(
            logits_row_ptr,
            logits_col_stride,
            processed_logits_ptr,
            processed_row_offset,
            key,
            temperature,
            chunk_start,
            num_tiles,
            vocab_size,
            TILE=TILE,
            DIVIDE=APPLY_TEMPERATURE,
            ADD_NOISE=True,
            NOISE=NOISE,
        )
    else:
        chunk_max, chunk_argmax = _chunk_argmax(
            logits_row_ptr,
            logits_col_stride,
            processed_logits_ptr,
            processed_row_offset,
            0,
            temperature,
            chunk_start,
            num_tiles,
            vocab_size,
            TILE=TILE,
            DIVIDE=False,
            ADD_NOISE=False,
            NOISE=NOISE,
        )
    partial = token.to(tl.int64) * num_chunks + chunk
    tl.store(partial_max_ptr + partial, chunk_max)
    tl.store(partial_ids_ptr + partial, chunk_argmax)


@triton.jit
def _reduce_chunks_kernel(
    sampled_ptr,  # [num_tokens] int64
    partial_max_ptr,  # [num_tokens, num_chunks]
    partial_ids_ptr,  # [num_tokens, num_chunks] int64
    num_chunks,
    vocab_size,
    BLOCK: tl.constexpr,
):
    token = tl.program_id(0)
    chunks = tl.arange(0, BLOCK)
    valid = chunks < num_chunks
    row = token.to(tl.int64) * num_chunks
    maxes = tl.load(partial_max_ptr + row + chunks, mask=valid, other=float("-inf"))
    ids = tl.load(partial_ids_ptr + row + chunks, mask=valid, other=vocab_size)
    best = tl.max(maxes, axis=0)
    # Chunks are in token order, so the lowest id among equal maxima is the
    # first chunk's; an all -inf row gives chunk 0's id, 0.
    sampled = tl.min(tl.where(valid & (maxes == best), ids, vocab_size), axis=0)
    tl.store(sampled_ptr + token, sampled)


def _check_inputs(
    logits: torch.Tensor,
    idx_mapping: torch.Tensor,
    temperature: torch.Tensor,
    seeds: torch.Tensor,
    pos: torch.Tensor,
    processed_logits_out: torch.Tensor | None,
) -> None:
    if logits.dim() != 2 or not logits.dtype.is_floating_point:
        raise ValueError(
            f"logits must be a 2-D floating-point tensor, got {logits.dim()}-D "
            f"{logits.dtype}"
        )
    num_tokens, vocab_size = logits.shape
    for name, tensor, length in (("idx_mapping", idx_mapping, num_tokens), ("pos", pos, num_tokens)):
        if tensor.dim() != 1 or tensor.shape[0] != length:
            raise ValueError(
                f"{name} must have shape [{length}] (one entry per logits row), "
                f"got {tuple(tensor.shape)}"
            )
    if idx_mapping.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"idx_mapping must be int32 or int64, got {idx_mapping.dtype}")
    # The Philox key is derived from the raw 64-bit values (as stock vLLM does).
    if seeds.dtype != torch.int64:
        raise ValueError(f"seeds must be int64, got {seeds.dtype}")
    if pos.dtype != torch.int64:
        raise ValueError(f"pos must be int64, got {pos.dtype}")
    if temperature.dtype != torch.float32:
        raise ValueError(f"temperature must be float32, got {temperature.dtype}")
    for name, tensor in (("temperature", temperature), ("seeds", seeds)):
        if tensor.dim() != 1:
            raise ValueError(f"{name} must be 1-D, got shape {tuple(tensor.shape)}")
    if processed_logits_out is not None and (
        processed_logits_out.dim() != 2
        or processed_logits_out.shape[1] != vocab_size
        or processed_logits_out.stride(1) != 1
    ):
        raise ValueError(
            "processed_logits_out must be [max_num_reqs, vocab_size] with "
            f"contiguous rows, got shape {tuple(processed_logits_out.shape)} "
            f"and strides {processed_logits_out.stride()}"
        )
    check_same_device(
        logits.device, idx_mapping=idx_mapping, temperature=temperature, seeds=seeds, pos=pos,
        processed_logits_out=processed_logits_out,
    )


def gumbel_sample(
    logits: torch.Tensor,  # [num_tokens, vocab_size]
    idx_mapping: torch.Tensor,  # [num_tokens]
    temperature: torch.Tensor,  # [max_num_reqs]
    seeds: torch.Tensor,  # [max_num_reqs]
    pos: torch.Tensor,  # [num_tokens]
    *,
    apply_temperature: bool,
    use_fp64: bool = False,
    fp64_stream: str = "philox",
    fp32_stream: str = "philox",
    processed_logits_out: torch.Tensor | None = None,  # [max_num_reqs, vocab_size]
    check_inputs: bool = True,
) -> torch.Tensor:
    r"""Sample one token per row of ``logits`` by Gumbel-max.

    The runner-facing entry point: it takes vLLM's own per-request state
    tensors, indexed through ``idx_mapping``, like vLLM 0.20's
    ``gumbel_sample``. :func:`vllm_sampling_plugin.ops.sample` is the
    friendlier one-row-per-request API.

    Parameters
    ----------
    logits : torch.Tensor
        ``[num_tokens, vocab_size]``, float32, bfloat16 or float16. Rows may be
        padded (``logits.stride(0) >= vocab_size``).
    idx_mapping : torch.Tensor
        ``[num_tokens]`` int32 (or int64): the request-state slot of each row.
    temperature : torch.Tensor
        ``[max_num_reqs]`` float32, read at ``idx_mapping[i]``. ``0`` means
        greedy: row ``i`` gets ``argmax(logits[i])`` with ties going to the
        lowest id, no noise drawn.
    seeds : torch.Tensor
        ``[max_num_reqs]`` int64, read at ``idx_mapping[i]``.
    pos : torch.Tensor
        ``[num_tokens]`` int64: the position of the token each row samples.
        With ``seeds`` it fixes the noise of the row (``ops/random.py``).
    apply_temperature : bool
        Divide the logits by the temperature here (as fp32 ``/``). Pass
        ``False`` when they were already divided.
    use_fp64 : bool
        FP64 noise and scores. The default FP32 path is faster and
        tail-accurate.
    fp64_stream : str
        Which FP64 noise (``ops/random.py``): ``"philox"`` reproduces vLLM
        0.20's ``gumbel_sample(use_fp64=True)`` token for token, ``"murmur3"``
        vLLM's from 0.31 on. Ignored for FP32 noise.
    fp32_stream : str
        Which FP32 noise: ``"philox"``, the plugin's own (the default; its
        cheapest), or ``"murmur3"``, vLLM's from 0.31 on
        (``gumbel_sample(use_fp64=False)``) token for token. Ignored for FP64
        noise.
    processed_logits_out : torch.Tensor, optional
        ``[max_num_reqs, vocab_size]``; row ``idx_mapping[i]`` receives the
        (temperature-divided, if ``apply_temperature``) fp32 logits of row
        ``i``, NaN included, as stock vLLM writes them for Eagle.
    check_inputs : bool
        False skips the argument checks (a few microseconds of host time a
        call): only for a caller whose tensors keep their dtypes, devices and
        shapes from call to call and were checked once (the runner
        integration's sampler).

    Returns
    -------
    torch.Tensor
        ``[num_tokens]`` int64, every id in ``[0, vocab_size)``. NaN logits
        never win, ``+inf`` beats everything (lowest id among several), and an
        all ``-inf`` / NaN row yields ``0``.

    Examples
    --------
    >>> logits = torch.randn(4, 32000, device="cuda")
    >>> rows = torch.arange(4, dtype=torch.int32, device="cuda")
    >>> temperature = torch.tensor([0.0, 0.7, 1.0, 1.3], device="cuda")
    >>> seeds = torch.tensor([1, 2, 3, 4], device="cuda")
    >>> pos = torch.tensor([10, 10, 11, 12], device="cuda")
    >>> gumbel_sample(logits, rows, temperature, seeds, pos, apply_temperature=True)
    tensor([...], device='cuda:0')  # [4] int64; row 0 is the argmax
    """
    noise = noise_code(use_fp64, fp64_stream, fp32_stream)
    if check_inputs:
        _check_inputs(logits, idx_mapping, temperature, seeds, pos, processed_logits_out)
    num_tokens, vocab_size = logits.shape
    if num_tokens == 0:
        return torch.empty(0, dtype=torch.int64, device=logits.device)
    plan = plan_launch(num_tokens, vocab_size, use_fp64, logits.device)
    partial_max = torch.empty(
        num_tokens,
        plan.num_chunks,
        dtype=torch.float64 if use_fp64 else torch.float32,
        device=logits.device,
    )
    partial_ids = torch.empty(
        num_tokens, plan.num_chunks, dtype=torch.int64, device=logits.device
    )
    _gumbel_partial_kernel[(num_tokens, plan.num_chunks)](
        partial_max,
        partial_ids,
        processed_logits_out,
        processed_logits_out.stride(0) if processed_logits_out is not None else 0,
        logits,
        logits.stride(0),
        logits.stride(1),
        idx_mapping,
        temperature,
        seeds,
        pos,
        vocab_size,
        plan.tiles_per_chunk,
        TILE=plan.tile,
        APPLY_TEMPERATURE=apply_temperature,
        NOISE=noise,
        num_warps=plan.num_warps,
        num_stages=plan.num_stages,
    )
    if plan.num_chunks == 1:
        return partial_ids.view(num_tokens)
    sampled = torch.empty(num_tokens, dtype=torch.int64, device=logits.device)
    _reduce_chunks_kernel[(num_tokens,)](
        sampled,
        partial_max,
        partial_ids,
        plan.num_chunks,
        vocab_size,
        BLOCK=next_power_of_2(plan.num_chunks),
        num_warps=1,
    )
    return sampled
