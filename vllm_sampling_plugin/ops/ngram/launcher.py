"""N-gram (prompt-lookup) proposals: the scan and finalize kernels beside their launchers.

For every request, find the longest ``n`` in ``[min_n, max_n]`` such that the
last ``n`` tokens of its history occurred earlier, and propose the (up to)
``k`` tokens that followed that earlier occurrence. The result is exactly what
vLLM 0.20's CPU proposer (``vllm/v1/spec_decode/ngram_proposer.py``,
``_find_longest_matched_ngram_and_propose_tokens``) returns; see
docs/ops-ngram.md for the precise rule.

Two kernels, no host synchronisation, fixed-shape outputs:

``_ngram_scan_kernel``, grid ``(num_reqs, num_splits)``
    A candidate is indexed by the position ``e`` right after an earlier
    occurrence (where its draft would start). Walking backwards from ``e - 1``
    and from the end of the history at the same time gives, in one pass, the
    longest ``n <= max_n`` that matches there: a match of length ``n`` at ``e``
    implies every shorter one at the same ``e``. The rule "longest ``n``,
    then earliest occurrence" becomes "largest ``n``, then smallest ``e``"
    (for a fixed ``n`` the occurrence starts at ``e - n``), so a candidate is
    packed into one integer key, ``n * BLOCK + (BLOCK - 1 - lane)`` (int32)
    inside a block and ``(n << 32) | (2**31 - 1 - e)`` (int64) across blocks,
    and max-reductions find the winner. Split ``g`` of a request handles
    blocks ``g, g + num_splits, ...`` of its history and writes its best key.
``_ngram_finalize_kernel``, one program per request
    Reduces the ``num_splits`` keys, decodes ``(n, e)`` and gathers the draft
    tokens; slots without a proposed token get a fill token.
"""

from __future__ import annotations


import torch
import triton
import triton.language as tl

from ..checks import check_kernels_run_on
from ..device import num_sms
from ..host_math import cdiv, next_power_of_2

# Candidate positions one scan iteration tests.
_SCAN_BLOCK = 1024
# Upper bound on the programs one request's scan is split over; the scratch
# buffer of the runner-facing launcher has this many columns.
NGRAM_MAX_SPLITS = 64
# Longest n-gram the kernel accepts: its match loop over n is unrolled.
NGRAM_MAX_N = 256
# Aim for this many scan programs per streaming multiprocessor.
_PROGRAMS_PER_SM = 8
# Positions and lengths are int32 in the kernels.
_LEN_LIMIT = 2**31 - 1
# Keys hold the draft start position e as (_POS_MAX - e) in their low 31 bits.
_POS_MAX = tl.constexpr(_LEN_LIMIT)


@triton.jit
def _ngram_scan_kernel(
    scores_ptr,  # [num_reqs, NGRAM_MAX_SPLITS] int64 (scratch)
    scores_stride,
    token_ids_ptr,  # [num_rows, max_len] int32 or int64
    token_ids_stride,
    seq_lens_ptr,  # [num_rows] int32 or int64
    idx_mapping_ptr,  # [num_reqs] int32 (batch index -> row); unused without it
    num_sampled_ptr,  # [num_reqs] int32; unused without it
    max_model_len,
    MIN_N: tl.constexpr,
    MAX_N: tl.constexpr,
    BLOCK: tl.constexpr,
    HAS_IDX_MAPPING: tl.constexpr,
    HAS_NUM_SAMPLED: tl.constexpr,
):
    batch_idx = tl.program_id(0)
    split = tl.program_id(1)
    num_splits = tl.num_programs(1)
    row = batch_idx
    if HAS_IDX_MAPPING:
        row = tl.load(idx_mapping_ptr + batch_idx)
    seq_len = tl.load(seq_lens_ptr + row).to(tl.int32)
    active = (seq_len >= MIN_N) & (seq_len < max_model_len)
    if HAS_NUM_SAMPLED:
        active = active & (tl.load(num_sampled_ptr + batch_idx) > 0)
    # Inactive rows leave their scratch untouched; the finalize kernel does not
    # read it for them.
    if active:
        tokens_ptr = token_ids_ptr + row.to(tl.int64) * token_ids_stride
        best = tl.zeros((), dtype=tl.int64)
        # Draft starts e lie in [MIN_N, seq_len - 1]: the occurrence must end
        # before the last token, so at least one token follows it.
        num_blocks = tl.cdiv(seq_len, BLOCK)
        lane = tl.arange(0, BLOCK)
        for block in range(split, num_blocks, num_splits):
            e = block * BLOCK + lane
            alive = (e >= MIN_N) & (e < seq_len)
            match_len = tl.zeros((BLOCK,), dtype=tl.int32)
            for t in tl.static_range(MAX_N):
                # seq_len > e > t, so the suffix load is in bounds whenever a
                # lane is alive; masking it keeps short rows in bounds.
                suffix_tok = tl.load(tokens_ptr + seq_len - 1 - t, mask=seq_len > t)
                alive = alive & (e > t)
                # Masked lanes issue no memory traffic: after the first step
                # almost every lane is dead on real text.
                tok = tl.load(tokens_ptr + e - 1 - t, mask=alive, other=0)
                alive = alive & (tok == suffix_tok)
                match_len += alive.to(tl.int32)
            # Inside a block an int32 key (n, BLOCK - 1 - lane) suffices: one
            # max gives the longest n, then the smallest e. Only the block's
            # winner is widened to the int64 key.
            block_key = tl.where(
                match_len >= MIN_N, match_len * BLOCK + (BLOCK - 1 - lane), 0
            )
            block_best = tl.max(block_key, axis=0)
            best_n = (block_best // BLOCK).to(tl.int64)
            best_e = block * BLOCK + (BLOCK - 1 - block_best % BLOCK)
            # e ^ _POS_MAX == _POS_MAX - e: the max then prefers the smallest e.
            key = (best_n << 32) | (best_e ^ _POS_MAX).to(tl.int64)
            best = tl.maximum(best, tl.where(block_best > 0, key, 0))
        tl.store(scores_ptr + batch_idx * scores_stride + split, best)


@triton.jit
def _ngram_finalize_kernel(
    drafts_ptr,  # [num_reqs, K] int64
    drafts_stride,
    num_drafts_ptr,  # [num_reqs] int32
    scores_ptr,  # [num_reqs, NGRAM_MAX_SPLITS] int64 (scratch)
    scores_stride,
    num_splits,
    token_ids_ptr,  # [num_rows, max_len] int32 or int64
    token_ids_stride,
    seq_lens_ptr,  # [num_rows] int32 or int64
    idx_mapping_ptr,  # [num_reqs] int32; unused without it
    num_sampled_ptr,  # [num_reqs] int32; unused without it
    fill_tokens_ptr,  # [num_rows, *] int64 (column 0 is read); unused without it
    fill_tokens_stride,
    max_model_len,
    MIN_N: tl.constexpr,
    K: tl.constexpr,
    K_PAD: tl.constexpr,
    SPLITS_PAD: tl.constexpr,
    HAS_IDX_MAPPING: tl.constexpr,
    HAS_NUM_SAMPLED: tl.constexpr,
    HAS_FILL_TOKENS: tl.constexpr,
):
    batch_idx = tl.program_id(0)
    row = batch_idx
    if HAS_IDX_MAPPING:
        row = tl.load(idx_mapping_ptr + batch_idx)
    seq_len = tl.load(seq_lens_ptr + row).to(tl.int32)
    active = (seq_len >= MIN_N) & (seq_len < max_model_len)
    if HAS_NUM_SAMPLED:
        active = active & (tl.load(num_sampled_ptr + batch_idx) > 0)
    tokens_ptr = token_ids_ptr + row.to(tl.int64) * token_ids_stride

    if HAS_FILL_TOKENS:
        fill = tl.load(fill_tokens_ptr + row.to(tl.int64) * fill_tokens_stride)
    else:
        fill = tl.load(tokens_ptr + seq_len - 1, mask=seq_len > 0, other=0)
    fill = fill.to(tl.int64)

    splits = tl.arange(0, SPLITS_PAD)
    keys = tl.load(
        scores_ptr + batch_idx * scores_stride + splits,
        mask=active & (splits < num_splits),
        other=0,
    )
    best = tl.max(keys, axis=0)
    draft_start = ((best & _POS_MAX) ^ _POS_MAX).to(tl.int32)
    # Same caps as the CPU proposer: k, the room left before max_model_len,
    # and the tokens that follow the occurrence.
    num_drafts = tl.minimum(K, max_model_len - seq_len)
    num_drafts = tl.minimum(num_drafts, seq_len - draft_start)
    num_drafts = tl.where(best > 0, num_drafts, 0)

    slots = tl.arange(0, K_PAD)
    proposed = slots < num_drafts
    tokens = tl.load(tokens_ptr + draft_start + slots, mask=proposed, other=0)
    drafts = tl.where(proposed, tokens.to(tl.int64), fill)
    tl.store(drafts_ptr + batch_idx * drafts_stride + slots, drafts, mask=slots < K)
    tl.store(num_drafts_ptr + batch_idx, num_drafts)


def scan_shape(num_reqs: int, max_len: int, device: torch.device) -> tuple[int, int]:
    """(block, splits): enough scan programs per request to fill the GPU, with
    the blocks of a full-length row spread evenly over them."""
    block = min(_SCAN_BLOCK, next_power_of_2(max(max_len, 16)))
    num_blocks = cdiv(max(max_len, 1), block)
    # The interpreter (no SM count) runs programs one after the other: fewer is faster.
    target = (num_sms(device) or 1) * _PROGRAMS_PER_SM
    splits = min(cdiv(target, max(num_reqs, 1)), num_blocks, NGRAM_MAX_SPLITS)
    blocks_per_split = cdiv(num_blocks, splits)
    return block, cdiv(num_blocks, blocks_per_split)


def _launch(
    token_ids: torch.Tensor,
    seq_lens: torch.Tensor,
    idx_mapping: torch.Tensor | None,
    num_sampled: torch.Tensor | None,
    fill_tokens: torch.Tensor | None,
    drafts: torch.Tensor,
    num_drafts: torch.Tensor,
    scores: torch.Tensor,
    num_reqs: int,
    min_n: int,
    max_n: int,
    max_model_len: int,
) -> None:
    """Launch both kernels on already validated arguments (no checks, no sync)."""
    if num_reqs == 0:
        return
    block, num_splits = scan_shape(num_reqs, token_ids.shape[1], token_ids.device)
    k = drafts.shape[1]
    # A dummy pointer for the optional inputs: never read when its switch is off.
    unused = seq_lens
    _ngram_scan_kernel[(num_reqs, num_splits)](
        scores,
        scores.stride(0),
        token_ids,
        token_ids.stride(0),
        seq_lens,
        idx_mapping if idx_mapping is not None else unused,
        num_sampled if num_sampled is not None else unused,
        max_model_len,
        MIN_N=min_n,
        MAX_N=max_n,
        BLOCK=block,
        HAS_IDX_MAPPING=idx_mapping is not None,
        HAS_NUM_SAMPLED=num_sampled is not None,
        num_warps=4 if block >= 512 else 1,
    )
    _ngram_finalize_kernel[(num_reqs,)](
        drafts,
        drafts.stride(0),
        num_drafts,
        scores,
        scores.stride(0),
        num_splits,
        token_ids,
        token_ids.stride(0),
        seq_lens,
        idx_mapping if idx_mapping is not None else unused,
        num_sampled if num_sampled is not None else unused,
        fill_tokens if fill_tokens is not None else unused,
        fill_tokens.stride(0) if fill_tokens is not None else 0,
        max_model_len,
        MIN_N=min_n,
        K=k,
        K_PAD=next_power_of_2(k),
        SPLITS_PAD=next_power_of_2(NGRAM_MAX_SPLITS),
        HAS_IDX_MAPPING=idx_mapping is not None,
        HAS_NUM_SAMPLED=num_sampled is not None,
        HAS_FILL_TOKENS=fill_tokens is not None,
        num_warps=1,
    )


_INT_DTYPES = (torch.int32, torch.int64)


def _check_ngram_sizes(min_n: int, max_n: int) -> None:
    if not isinstance(min_n, int) or min_n < 1:
        raise ValueError(f"min_n must be an integer >= 1, got {min_n!r}")
    if not isinstance(max_n, int) or not min_n <= max_n <= NGRAM_MAX_N:
        raise ValueError(
            f"max_n must be an integer in [min_n ({min_n}), {NGRAM_MAX_N}], "
            f"got {max_n!r}"
        )


def _device_of(name: str, x: torch.Tensor) -> torch.device:
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    return x.device


def _check_tensor(name: str, x: torch.Tensor, ndim: int, dtypes, device) -> None:
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {tuple(x.shape)}")
    if x.dtype not in dtypes:
        names = ", ".join(str(d) for d in dtypes)
        raise ValueError(f"{name} must have dtype in ({names}), got {x.dtype}")
    if x.device != device:
        raise ValueError(f"{name} must be on {device}, got {x.device}")
    if x.shape[-1] > 1 and x.stride(-1) != 1:
        raise ValueError(f"{name} must be contiguous in its last dimension")


def ngram_propose(
    token_ids: torch.Tensor,
    seq_lens: torch.Tensor,
    *,
    min_n: int,
    max_n: int,
    k: int,
    max_model_len: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Propose up to ``k`` draft tokens per row by n-gram (prompt) lookup.

    For row ``r`` with history ``h = token_ids[r, :seq_lens[r]]`` (length
    ``T``), find the largest ``n`` in ``[min_n, max_n]`` such that the last
    ``n`` tokens ``h[T-n:]`` also occur at some ``h[s:s+n]`` with
    ``s + n <= T - 1`` (overlap with the suffix allowed; at least one token
    must follow). Among occurrences of that ``n`` take the smallest ``s``.
    The draft is ``h[s+n : s+n+c]`` with ``c = min(k, max_model_len - T,
    T - (s+n))``. There is no draft when ``T < min_n``, when
    ``T >= max_model_len``, or when no ``n`` in the range matches. This is
    token for token vLLM 0.20's CPU ``NgramProposer``.

    Parameters
    ----------
    token_ids: torch.Tensor
        ``[R, L]`` int32 or int64 token histories; only the first
        ``seq_lens[r]`` entries of row ``r`` are read.
    seq_lens: torch.Tensor
        ``[R]`` int32 or int64 history lengths, each in ``[0, L]``.
    min_n, max_n: int
        Range of n-gram lengths to try, ``1 <= min_n <= max_n <= 256``.
    k: int
        Number of draft slots, ``k >= 1``.
    max_model_len: int, optional
        A request never grows past this many tokens: at most
        ``max_model_len - T`` tokens are proposed. ``None`` means no cap.

    Returns
    -------
    drafts: torch.Tensor
        ``[R, k]`` int64. ``drafts[r, :num_drafts[r]]`` is the proposal; every
        other slot holds the row's last token ``token_ids[r, seq_lens[r]-1]``
        (0 for an empty row), so the whole tensor is made of valid token ids.
    num_drafts: torch.Tensor
        ``[R]`` int32 number of proposed tokens per row, in ``[0, k]``.

    Checking that ``seq_lens`` lies in ``[0, L]`` reads it back to the host;
    the runner-facing :func:`ngram_propose_into` makes no such check and no
    allocation.

    Examples
    --------
    >>> token_ids = torch.tensor([[1, 2, 3, 4, 1, 2, 3]], device="cuda")
    >>> seq_lens = torch.tensor([7], device="cuda")
    >>> drafts, num_drafts = ngram_propose(token_ids, seq_lens, min_n=2, max_n=3, k=2)
    >>> drafts, num_drafts
    (tensor([[4, 1]], device='cuda:0'), tensor([2], device='cuda:0', dtype=torch.int32))
    """
    device = _check_propose_inputs(token_ids, seq_lens, min_n, max_n, k, max_model_len)
    num_rows = token_ids.shape[0]

    drafts = torch.empty(num_rows, k, dtype=torch.int64, device=device)
    num_drafts = torch.empty(num_rows, dtype=torch.int32, device=device)
    scores = ngram_scratch(num_rows, device)
    _launch(
        token_ids,
        seq_lens,
        None,
        None,
        None,
        drafts,
        num_drafts,
        scores,
        num_rows,
        min_n,
        max_n,
        _LEN_LIMIT if max_model_len is None else min(max_model_len, _LEN_LIMIT),
    )
    return drafts, num_drafts


def ngram_scratch(max_num_reqs: int, device: torch.device | str) -> torch.Tensor:
    """``[max_num_reqs, NGRAM_MAX_SPLITS]`` int64 scratch for ngram_propose_into."""
    return torch.empty(max_num_reqs, NGRAM_MAX_SPLITS, dtype=torch.int64, device=device)


def ngram_propose_into(
    history: torch.Tensor,
    total_len: torch.Tensor,
    idx_mapping: torch.Tensor,
    drafts_out: torch.Tensor,
    num_drafts_out: torch.Tensor,
    scratch: torch.Tensor,
    *,
    min_n: int,
    max_n: int,
    max_model_len: int,
    num_sampled: torch.Tensor | None = None,
    fill_tokens: torch.Tensor | None = None,
    check_inputs: bool = True,
) -> torch.Tensor:
    r"""N-gram proposals over a model runner's persistent buffers.

    The batch entry ``i`` reads history row ``idx_mapping[i]``. Same matching
    rule as :func:`ngram_propose`. Nothing is allocated and nothing is read
    back to the host (safe under CUDA graph capture and async scheduling);
    only cheap shape checks run on the host.

    Parameters
    ----------
    history: torch.Tensor
        ``[max_num_reqs, max_len]`` int32 or int64 token history of every row
        (vLLM's ``RequestState.all_token_ids.gpu``).
    total_len: torch.Tensor
        ``[max_num_reqs]`` int32 valid length of each row (``total_len.gpu``).
    idx_mapping: torch.Tensor
        ``[num_reqs]`` int32 batch index -> history row.
    drafts_out: torch.Tensor
        ``[>= num_reqs, k]`` int64, written in batch order; ``k`` is its width.
    num_drafts_out: torch.Tensor
        ``[>= num_reqs]`` int32, written in batch order.
    scratch: torch.Tensor
        ``[>= num_reqs, NGRAM_MAX_SPLITS]`` int64 from :func:`ngram_scratch`.
    min_n, max_n: int
        Range of n-gram lengths, ``1 <= min_n <= max_n <= 256``.
    max_model_len: int
        Proposals never extend a request past this length.
    num_sampled: torch.Tensor, optional
        ``[num_reqs]`` int32; batch entries with 0 (chunked prefill) get no
        proposal, as in vLLM's CPU proposer.
    fill_tokens: torch.Tensor, optional
        ``[max_num_reqs, *]`` int64; column 0 of row ``idx_mapping[i]`` fills
        the slots of entry ``i`` that hold no proposal (vLLM's
        ``last_sampled_tokens``). Without it the row's last history token is
        used.
    check_inputs: bool
        False skips the argument checks below (about 10 us of host time a
        call): only for a caller that passes the same buffers every step and
        has had them checked once (the runner integration does).

    Returns
    -------
    torch.Tensor
        ``drafts_out[:num_reqs]``: ``[num_reqs, k]`` int64 valid token ids.
    """
    if fill_tokens is not None and fill_tokens.dim() == 1:
        fill_tokens = fill_tokens.unsqueeze(1)
    num_reqs = idx_mapping.shape[0]
    if check_inputs:
        _check_into_inputs(
            history, total_len, idx_mapping, drafts_out, num_drafts_out, scratch, min_n,
            max_n, max_model_len, num_sampled, fill_tokens,
        )
    _launch(
        history,
        total_len,
        idx_mapping,
        num_sampled,
        fill_tokens,
        drafts_out,
        num_drafts_out,
        scratch,
        num_reqs,
        min_n,
        max_n,
        max_model_len,
    )
    return drafts_out[:num_reqs]


def _check_propose_inputs(token_ids, seq_lens, min_n, max_n, k, max_model_len) -> torch.device:
    """The checks of ``ngram_propose`` (one read of ``seq_lens``); returns the device."""
    _check_ngram_sizes(min_n, max_n)
    if not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}")
    if max_model_len is not None and (
        not isinstance(max_model_len, int) or max_model_len < 1
    ):
        raise ValueError(
            f"max_model_len must be None or an integer >= 1, got {max_model_len!r}"
        )
    device = _device_of("token_ids", token_ids)
    _check_tensor("token_ids", token_ids, 2, _INT_DTYPES, device)
    _check_tensor("seq_lens", seq_lens, 1, _INT_DTYPES, device)
    num_rows, max_len = token_ids.shape
    if seq_lens.shape[0] != num_rows:
        raise ValueError(
            f"seq_lens must have {num_rows} entries (rows of token_ids), "
            f"got {seq_lens.shape[0]}"
        )
    if max_len >= _LEN_LIMIT:
        raise ValueError(
            f"token_ids rows must be shorter than {_LEN_LIMIT}, got {max_len}"
        )
    if num_rows > 0:
        lo, hi = torch.aminmax(seq_lens)
        if int(lo) < 0 or int(hi) > max_len:
            raise ValueError(
                f"seq_lens must lie in [0, {max_len}] (columns of token_ids), "
                f"got values in [{int(lo)}, {int(hi)}]"
            )
    check_kernels_run_on("token_ids", device)
    return device


def _check_into_inputs(
    history, total_len, idx_mapping, drafts_out, num_drafts_out, scratch, min_n, max_n,
    max_model_len, num_sampled, fill_tokens,
) -> None:
    """The checks of ``ngram_propose_into`` (shapes, dtypes, devices: no values read)."""
    num_reqs = idx_mapping.shape[0]
    _check_ngram_sizes(min_n, max_n)
    device = _device_of("history", history)
    _check_tensor("history", history, 2, _INT_DTYPES, device)
    _check_tensor("total_len", total_len, 1, _INT_DTYPES, device)
    _check_tensor("idx_mapping", idx_mapping, 1, (torch.int32,), device)
    _check_tensor("drafts_out", drafts_out, 2, (torch.int64,), device)
    _check_tensor("num_drafts_out", num_drafts_out, 1, (torch.int32,), device)
    _check_tensor("scratch", scratch, 2, (torch.int64,), device)
    if drafts_out.shape[0] < num_reqs or drafts_out.shape[1] < 1:
        raise ValueError(
            f"drafts_out must be [>= {num_reqs}, k >= 1], got {tuple(drafts_out.shape)}"
        )
    if num_drafts_out.shape[0] < num_reqs:
        raise ValueError(f"num_drafts_out must have >= {num_reqs} entries")
    if scratch.shape[0] < num_reqs or scratch.shape[1] < NGRAM_MAX_SPLITS:
        raise ValueError(
            f"scratch must be [>= {num_reqs}, >= {NGRAM_MAX_SPLITS}], "
            f"got {tuple(scratch.shape)}"
        )
    if total_len.shape[0] != history.shape[0]:
        raise ValueError("total_len must have one entry per history row")
    if not isinstance(max_model_len, int) or max_model_len < 1:
        raise ValueError(
            f"max_model_len must be an integer >= 1, got {max_model_len!r}"
        )
    if num_sampled is not None:
        _check_tensor("num_sampled", num_sampled, 1, _INT_DTYPES, device)
        if num_sampled.shape[0] < num_reqs:
            raise ValueError(f"num_sampled must have >= {num_reqs} entries")
    if fill_tokens is not None:
        _check_tensor("fill_tokens", fill_tokens, 2, _INT_DTYPES, device)
        if fill_tokens.shape[0] != history.shape[0]:
            raise ValueError("fill_tokens must have one row per history row")
