"""Verifying point-mass drafts by matching: keep the drafts the target's own draw repeats.

A draft that comes without a draft distribution (an n-gram draft is a point
mass ``q = delta(d)``) is verified exactly by drawing the target token ``y``
at that logit, as the sampler would without speculation, and accepting ``d``
iff ``y == d``: the draft is accepted with probability ``p(d)``, and a
rejected logit emits ``y``, which then follows ``p`` restricted to the other
tokens, i.e. the residual ``max(p - q, 0)`` normalised. So the acceptance rate
is the rejection sampler's, and every emitted token is the one the sampler
draws at that (seed, position): a seeded request gives the same tokens with
and without speculation, and whatever steps the scheduler cut its drafts
into (preemption, other batch-mates).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..host_math import next_power_of_2


@triton.jit
def _accept_matching_kernel(
    sampled_ptr,  # [num_reqs, num_spec_steps + 1] int64
    sampled_stride,
    num_sampled_ptr,  # [num_reqs] int32
    target_tokens_ptr,  # [num_logits]: the target's draw at every logit
    draft_tokens_ptr,  # [num_logits]: entry cu_num_logits[r] + j + 1 is draft j of request r
    cu_num_logits_ptr,  # [num_reqs + 1] int32
    num_spec_steps,
    OUT_PAD: tl.constexpr,
):
    req = tl.program_id(0)
    start = tl.load(cu_num_logits_ptr + req)
    num_logits = tl.load(cu_num_logits_ptr + req + 1) - start
    cols = tl.arange(0, OUT_PAD)
    has_logit = cols < num_logits
    target = tl.load(target_tokens_ptr + start + cols, mask=has_logit, other=-1).to(tl.int64)
    # Logit j verifies draft j, which sits one entry later; the last logit
    # (the bonus position) has no draft.
    has_draft = cols < num_logits - 1
    draft = tl.load(draft_tokens_ptr + start + 1 + cols, mask=has_draft, other=-1).to(tl.int64)
    stops = has_logit & ((target != draft) | (cols == num_logits - 1))
    # The first logit whose draft is rejected (or the bonus logit) emits the
    # last token of the row.
    num_accepted = tl.min(tl.where(stops, cols, OUT_PAD), axis=0)
    out = tl.where(cols <= num_accepted, target, -1)
    tl.store(sampled_ptr + req * sampled_stride + cols, out, mask=cols <= num_spec_steps)
    tl.store(num_sampled_ptr + req, (num_accepted + 1).to(tl.int32))


def accept_matching_drafts(
    target_tokens: torch.Tensor,  # [num_logits]
    draft_tokens: torch.Tensor,  # [num_logits]
    cu_num_logits: torch.Tensor,  # [num_reqs + 1] int32
    num_speculative_steps: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Verify point-mass drafts against the target's own draws (no host sync).

    The layout is the V2 runner's, as in :func:`rejection_sample_packed`:
    request ``r`` owns logits ``cu_num_logits[r] .. cu_num_logits[r + 1] - 1``
    (one per draft, then the bonus position), and ``draft_tokens[cu_num_logits[r]
    + j + 1]`` is its draft ``j``.

    Args:
        target_tokens: int32/int64 ``[num_logits]``, the token the sampler draws
            at every logit of the processed target (seeded by the logit's
            position), e.g. ``gumbel_sample`` over all rows.
        draft_tokens: int32/int64 ``[num_logits]``, ``input_ids[logits_indices]``.
        cu_num_logits: int32 ``[num_reqs + 1]``; a request has at most
            ``num_speculative_steps + 1`` logits.
        num_speculative_steps: K, the width of the output minus one.

    Returns:
        ``(sampled, num_sampled)``: int64 ``[num_reqs, K + 1]`` holding the
        target's tokens up to and including the first logit whose draft they
        reject (or the bonus logit), then ``-1``; and int32 ``[num_reqs]``, the
        number of tokens per row. The accepted drafts equal the target's
        tokens at their logits, so a row is always the sampler's own draws.

    Example::

        >>> target = torch.tensor([5, 7, 9, 4])      # request 0: 3 logits, request 1: 1
        >>> drafts = torch.tensor([1, 5, 8, 2])      # request 0's drafts: 5, 8
        >>> cu = torch.tensor([0, 3, 4], dtype=torch.int32)
        >>> sampled, num_sampled = accept_matching_drafts(target, drafts, cu, 2)
        >>> sampled.tolist(), num_sampled.tolist()   # draft 5 accepted, draft 8 rejected
        ([[5, 7, -1], [4, -1, -1]], [2, 1])
    """
    if num_speculative_steps < 1:
        raise ValueError(f"num_speculative_steps must be >= 1, got {num_speculative_steps}")
    if target_tokens.shape != draft_tokens.shape or target_tokens.dim() != 1:
        raise ValueError(
            "target_tokens and draft_tokens must be 1-D with one entry per logit, got "
            f"{tuple(target_tokens.shape)} and {tuple(draft_tokens.shape)}"
        )
    if cu_num_logits.dim() != 1 or cu_num_logits.dtype != torch.int32:
        raise ValueError(
            f"cu_num_logits must be 1-D int32, got {tuple(cu_num_logits.shape)} "
            f"{cu_num_logits.dtype}"
        )
    num_reqs = cu_num_logits.shape[0] - 1
    device = target_tokens.device
    sampled = torch.empty(num_reqs, num_speculative_steps + 1, dtype=torch.int64, device=device)
    num_sampled = torch.empty(num_reqs, dtype=torch.int32, device=device)
    if num_reqs == 0:
        return sampled, num_sampled
    _accept_matching_kernel[(num_reqs,)](
        sampled,
        sampled.stride(0),
        num_sampled,
        target_tokens,
        draft_tokens,
        cu_num_logits,
        num_speculative_steps,
        OUT_PAD=next_power_of_2(num_speculative_steps + 1),
        num_warps=1,
    )
    return sampled, num_sampled
