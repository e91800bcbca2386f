"""How many draft tokens a block-packed n-gram scan found per request: one kernel.

vLLM's GPU n-gram proposer (0.32 on, ``spec_decode/ngram/speculator.py``)
leaves its scan's result in ``scores[b, block]``: each block's best match of
request ``b`` packed as ``n * (max_len + 1) + pos + 1`` (0: none), where
``pos + n`` is where the draft would start in the request's history. It
writes ``k`` drafts for every request and pads a request without a match
with its last token, so the number of real drafts is nowhere. This kernel
reduces the scan the way that proposer's finalize kernel does and writes
``min(total_len - (pos + n), k)`` for a match, 0 otherwise, in one launch
(the same reduction in torch took about ten eager launches a step).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..checks import check_kernels_run_on
from ..host_math import next_power_of_2


@triton.jit
def _packed_match_counts_kernel(
    scores_ptr,  # [>= num_reqs, num_blocks] int64
    scores_stride,
    state_rows_ptr,  # [num_reqs] int32 or int64: batch entry -> request-state row
    total_len_ptr,  # [num_state_rows] int32 or int64
    counts_ptr,  # [>= num_reqs] int32 (output)
    num_blocks,
    max_len,
    k,
    BLOCKS: tl.constexpr,
):
    entry = tl.program_id(0)
    blocks = tl.arange(0, BLOCKS)
    scores = tl.load(
        scores_ptr + entry * scores_stride + blocks, mask=blocks < num_blocks, other=0
    )
    best = tl.max(scores, axis=0)
    packed = best - 1
    draft_start = packed % (max_len + 1) + packed // (max_len + 1)  # pos + n
    state_row = tl.load(state_rows_ptr + entry)
    total_len = tl.load(total_len_ptr + state_row).to(tl.int64)
    available = tl.minimum(tl.maximum(total_len - draft_start, 0), k)
    tl.store(counts_ptr + entry, tl.where(best > 0, available, 0).to(tl.int32))


def count_packed_matches_(
    counts_out: torch.Tensor,
    scores: torch.Tensor,
    state_rows: torch.Tensor,
    total_len: torch.Tensor,
    *,
    max_len: int,
    k: int,
) -> torch.Tensor:
    r"""Write how many real drafts a block-packed n-gram scan found per request.

    Parameters
    ----------
    counts_out: torch.Tensor
        ``[>= num_reqs]`` int32, written in batch order (entries past
        ``num_reqs`` are left alone).
    scores: torch.Tensor
        ``[>= num_reqs, num_blocks]`` int64: row ``i`` holds batch entry
        ``i``'s best match per block, ``n * (max_len + 1) + pos + 1``, or 0.
    state_rows: torch.Tensor
        ``[num_reqs]`` int32 or int64: batch entry -> row of ``total_len``
        (vLLM's ``idx_mapping``); its length is ``num_reqs``.
    total_len: torch.Tensor
        ``[num_state_rows]`` int32 or int64: each request's history length.
    max_len: int
        The packing's stride less one (the proposer's ``max_model_len``).
    k: int
        Drafts proposed per request; counts are at most ``k``.

    Returns
    -------
    torch.Tensor
        ``counts_out[:num_reqs]``: for entry ``i`` with a match,
        ``min(max(total_len[state_rows[i]] - (pos + n), 0), k)``; 0 without.

    Nothing is allocated and nothing is read back to the host: safe on a
    runner's hot path under async scheduling.

    Examples
    --------
    (CPU tensors need ``TRITON_INTERPRET=1``; on a GPU pass CUDA tensors.)

    >>> scores = torch.tensor([[0, 2 * 101 + 3 + 1], [0, 0]])  # n=2, pos=3; none
    >>> counts = torch.empty(2, dtype=torch.int32)
    >>> count_packed_matches_(counts, scores, torch.tensor([0, 1], dtype=torch.int32),
    ...                       torch.tensor([9, 4]), max_len=100, k=3).tolist()
    [3, 0]
    """
    num_reqs = state_rows.shape[0]
    if num_reqs == 0:
        return counts_out[:0]
    check_kernels_run_on("scores", scores.device)
    num_blocks = scores.shape[1]
    _packed_match_counts_kernel[(num_reqs,)](
        scores,
        scores.stride(0),
        state_rows,
        total_len,
        counts_out,
        num_blocks,
        max_len,
        k,
        BLOCKS=next_power_of_2(num_blocks),
        num_warps=1,
    )
    return counts_out[:num_reqs]
