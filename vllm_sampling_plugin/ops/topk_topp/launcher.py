"""The fused top-k/top-p kernels and ``top_k_top_p_sample``, their launcher.

``_top_k_top_p_kernel`` runs the chunk pass, one program per (row, chunk), and
in a launch of one wave merges each row in its last chunk to finish; larger
launches merge in ``_merge_kernel``, one program per row. The package doc
has the algorithm.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..checks import check_same_device
from ..host_math import next_power_of_2
from ..random import noise_code
from .chunk import chunk_pass
from .exact import MAX_VOCAB_SIZE
from .merge import merge_row
from .plan import (
    DEFAULT_TUNING,
    GUMBEL_TILE,
    TopKTopPTuning,
    check_tuning,
    launch_shape,
    merges_in_chunk_kernel,
)
from .workspace import workspace_for


@triton.jit
def _top_k_top_p_kernel(
    sampled_ptr,  # [num_tokens] int64
    paths_ptr,  # [num_tokens] int32 or None: which step decided each row
    arrivals_ptr,  # [num_tokens] int32, zero between calls
    # The arguments of ``chunk_pass`` and ``merge_row``, as they document them:
    chunk_stats,  # 4 x [num_tokens, num_chunks]: best, best id, mass, floor
    chunk_lists,  # 2 x [num_tokens, num_chunks, LIST]: listed logits, ids
    scratch,  # the merge's: 2 x [num_tokens, WIDE], [num_tokens, 256]
    logits,  # ([num_tokens, vocab], row stride, column stride)
    requests,  # (idx_mapping, temperature, seeds, pos, top_k, top_p)
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
    NOISE: tl.constexpr,
    MERGE: tl.constexpr,
):
    # One program per (row, chunk), a row's chunks next to each other in
    # launch order: rows finish, and are merged, while later rows stream in.
    token = tl.program_id(0) // NUM_CHUNKS
    chunk = tl.program_id(0) % NUM_CHUNKS
    chunk_pass(
        token, chunk, NUM_CHUNKS, chunk_stats, chunk_lists, logits, requests, vocab_size,
        CHUNK, GROUP, PER_GROUP, LIST, TILE, APPLY_TEMPERATURE, NOISE,
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
        merge_row(
            token, sampled_ptr, paths_ptr, chunk_stats, chunk_lists, scratch, logits, requests,
            vocab_size, NUM_CHUNKS, CHUNKS_BLOCK, LIST, SHORT, WIDE, ROW_BLOCK,
            APPLY_TEMPERATURE, CHUNK, NOISE,
        )


@triton.jit
def _merge_kernel(
    sampled_ptr,  # [num_tokens] int64
    paths_ptr,  # [num_tokens] int32 or None
    # As in _top_k_top_p_kernel:
    chunk_stats,
    chunk_lists,
    scratch,
    logits,
    requests,
    vocab_size,
    NUM_CHUNKS: tl.constexpr,
    CHUNKS_BLOCK: tl.constexpr,
    LIST: tl.constexpr,
    SHORT: tl.constexpr,
    WIDE: tl.constexpr,
    ROW_BLOCK: tl.constexpr,
    APPLY_TEMPERATURE: tl.constexpr,
    CHUNK: tl.constexpr,
    NOISE: tl.constexpr,
):
    merge_row(
        tl.program_id(0), sampled_ptr, paths_ptr, chunk_stats, chunk_lists, scratch, logits,
        requests, vocab_size, NUM_CHUNKS, CHUNKS_BLOCK, LIST, SHORT, WIDE, ROW_BLOCK,
        APPLY_TEMPERATURE, CHUNK, NOISE,
    )


def _check_inputs(
    logits: torch.Tensor,
    idx_mapping: torch.Tensor,
    temperature: torch.Tensor,
    seeds: torch.Tensor,
    pos: torch.Tensor,
    top_k: torch.Tensor,
    top_p: torch.Tensor,
    paths_out: torch.Tensor | None,
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
    check_same_device(
        logits.device, idx_mapping=idx_mapping, temperature=temperature, seeds=seeds, pos=pos,
        top_k=top_k, top_p=top_p,
    )
    if paths_out is not None and (
        paths_out.shape != (num_tokens,)
        or paths_out.dtype != torch.int32
        or paths_out.device != logits.device
    ):
        raise ValueError(
            f"paths_out must be a [{num_tokens}] int32 tensor on {logits.device}, got "
            f"{tuple(paths_out.shape)} {paths_out.dtype} on {paths_out.device}"
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
    fp64_stream: str = "philox",
    fp32_stream: str = "philox",
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
    fp64_stream : str
        Which FP64 noise, as for ``gumbel_sample``: ``"philox"`` (vLLM 0.20)
        or ``"murmur3"`` (vLLM 0.31 on). Ignored for FP32 noise.
    fp32_stream : str
        Which FP32 noise, as for ``gumbel_sample``: ``"philox"`` (the
        plugin's) or ``"murmur3"`` (vLLM 0.31 on). Ignored for FP64 noise.
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
    noise = noise_code(use_fp64, fp64_stream, fp32_stream)
    _check_inputs(logits, idx_mapping, temperature, seeds, pos, top_k, top_p, paths_out)
    check_tuning(tuning)
    num_tokens, vocab_size = logits.shape
    device = logits.device
    if num_tokens == 0:
        return torch.empty(0, dtype=torch.int64, device=device)
    shape = launch_shape(vocab_size, tuning)
    work = workspace_for(
        device, num_tokens, shape.num_chunks, shape.list_len, tuning.wide_list, use_fp64
    )
    sampled = torch.empty(num_tokens, dtype=torch.int64, device=device)

    fused = merges_in_chunk_kernel(num_tokens, shape, tuning)
    buffers = (
        work.chunk_stats,
        work.chunk_lists,
        work.scratch,
        (logits, logits.stride(0), logits.stride(1)),
        (idx_mapping, temperature, seeds, pos, top_k, top_p),
        vocab_size,
    )
    merge_shape = dict(
        NUM_CHUNKS=shape.num_chunks,
        CHUNKS_BLOCK=next_power_of_2(shape.num_chunks),
        LIST=shape.list_len,
        SHORT=tuning.short_list,
        WIDE=tuning.wide_list,
        ROW_BLOCK=tuning.row_block,
        APPLY_TEMPERATURE=apply_temperature,
        CHUNK=shape.chunk,
        NOISE=noise,
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
