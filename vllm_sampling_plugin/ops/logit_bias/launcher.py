"""Allowed tokens, logit bias and min-tokens stop masking in one race-free pass.

vLLM 0.20's ``_bias_kernel`` (``v1/worker/gpu/sample/logit_bias.py``) keeps
the allowed tokens by saving their logits, storing ``-inf`` over the whole
row and storing the saved logits back, all in one program and with no
barrier between the three phases. The threads that store ``-inf`` and the
threads that restore a token are different threads, so nothing orders their
writes to the same address: the restore can land first and be overwritten,
and the row can end all ``-inf`` (the draw then returns id 0). Its logit-bias
and stop-token phases read and write addresses another thread has just
written, with the same hazard.

Here every logit is read and written by exactly one thread, which decides
its final value from the request's lists alone: it looks itself up in each
(sorted) list by binary search and applies, in vLLM's order, the allowed
mask, its bias and the min-tokens stop mask. No thread writes an address
another thread reads or writes, so there is nothing to order. The grid also
splits the vocabulary, so a row is no longer one program's serial sweep.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..checks import check_same_device
from ..host_math import cdiv

# Vocabulary entries one program decides.
_BLOCK_V = 1024


@triton.jit
def _find_in_sorted(
    ids_ptr,  # [count] int32, ascending
    count,
    tokens,  # [BLOCK_V] int32
    SEARCH_STEPS: tl.constexpr,  # ceil(log2(the list's capacity))
):
    """``(found, index)`` of each token in ``ids[0:count]`` (``count >= 1``):
    the last index whose id is ``<= token``, and whether that id is the token."""
    base = tl.zeros_like(tokens)
    length = count
    # Invariant: base + length <= count, so every probe is in bounds. Once
    # length is 1 the step moves nothing (half == 0).
    for _ in tl.static_range(SEARCH_STEPS):
        half = length // 2
        probe = tl.load(ids_ptr + base + half)
        base = tl.where(probe <= tokens, base + half, base)
        length -= half
    return tl.load(ids_ptr + base) == tokens, base


@triton.jit
def _logit_bias_kernel(
    logits_ptr,  # [num_tokens, vocab_size] fp32, modified in place
    logits_stride,
    vocab_size,
    idx_mapping_ptr,  # [num_tokens] int32: logit row -> request row
    pos_ptr,  # [num_tokens] int64: position of the token the logits follow
    num_allowed_ptr,  # [max_num_reqs] int32
    allowed_ids_ptr,  # [max_num_reqs, max_allowed] int32, each row ascending
    allowed_ids_stride,
    num_bias_ptr,  # [max_num_reqs] int32
    bias_ids_ptr,  # [max_num_reqs, max_bias] int32, each row ascending, unique
    bias_ids_stride,
    bias_ptr,  # [max_num_reqs, max_bias] fp32, aligned with bias_ids
    bias_stride,
    min_lens_ptr,  # [max_num_reqs] int32: prompt_len + min_tokens
    num_stop_ptr,  # [max_num_reqs] int32
    stop_ids_ptr,  # [max_num_reqs, max_stop] int32, each row ascending
    stop_ids_stride,
    ALLOWED_STEPS: tl.constexpr,
    BIAS_STEPS: tl.constexpr,
    STOP_STEPS: tl.constexpr,
    BLOCK_V: tl.constexpr,
):
    token_idx = tl.program_id(0).to(tl.int64)
    req = tl.load(idx_mapping_ptr + token_idx).to(tl.int64)
    num_allowed = tl.load(num_allowed_ptr + req)
    num_bias = tl.load(num_bias_ptr + req)
    num_stop = tl.load(num_stop_ptr + req)
    # The token sampled from these logits lands at pos + 1, after
    # pos + 1 - prompt_len outputs; stop tokens stay masked while that count
    # is below min_tokens.
    stops_masked = (num_stop > 0) & (tl.load(pos_ptr + token_idx) + 1 < tl.load(min_lens_ptr + req))
    if (num_allowed == 0) & (num_bias == 0) & (stops_masked == 0):
        return

    tokens = tl.program_id(1) * BLOCK_V + tl.arange(0, BLOCK_V)
    in_vocab = tokens < vocab_size
    row_ptr = logits_ptr + token_idx * logits_stride
    logits = tl.load(row_ptr + tokens, mask=in_vocab)
    if num_allowed > 0:
        allowed, _ = _find_in_sorted(
            allowed_ids_ptr + req * allowed_ids_stride, num_allowed, tokens, ALLOWED_STEPS
        )
        logits = tl.where(allowed, logits, float("-inf"))
    if num_bias > 0:
        biased, at = _find_in_sorted(
            bias_ids_ptr + req * bias_ids_stride, num_bias, tokens, BIAS_STEPS
        )
        bias = tl.load(bias_ptr + req * bias_stride + at, mask=biased, other=0.0)
        # where, not "+ 0.0": an unbiased -0.0 keeps its sign.
        logits = tl.where(biased, logits + bias, logits)
    if stops_masked:
        stop, _ = _find_in_sorted(
            stop_ids_ptr + req * stop_ids_stride, num_stop, tokens, STOP_STEPS
        )
        logits = tl.where(stop, float("-inf"), logits)
    tl.store(row_ptr + tokens, logits, mask=in_vocab)


def _search_steps(capacity: int) -> int:
    """Halvings that take a list of ``capacity`` entries down to one."""
    return max(capacity - 1, 0).bit_length()


def apply_logit_bias_(
    logits: torch.Tensor,
    idx_mapping: torch.Tensor,
    pos: torch.Tensor,
    num_allowed: torch.Tensor,
    allowed_ids: torch.Tensor,
    num_bias: torch.Tensor,
    bias_ids: torch.Tensor,
    bias: torch.Tensor,
    min_lens: torch.Tensor,
    num_stop: torch.Tensor,
    stop_ids: torch.Tensor,
    *,
    check_inputs: bool = True,
) -> torch.Tensor:
    r"""Apply allowed token ids, logit bias and min-tokens stop masking, in place.

    Logit row ``i`` belongs to request row ``r = idx_mapping[i]`` and is
    changed, token by token, in this order (vLLM's):

    1. allowed ids: if ``num_allowed[r] > 0``, every token not in
       ``allowed_ids[r, :num_allowed[r]]`` becomes ``-inf``;
    2. logit bias: ``bias[r, j]`` is added to token ``bias_ids[r, j]`` for
       ``j < num_bias[r]`` (a masked token stays ``-inf``);
    3. min tokens: if ``num_stop[r] > 0`` and ``pos[i] + 1 < min_lens[r]``,
       every token in ``stop_ids[r, :num_stop[r]]`` becomes ``-inf``. The
       token drawn from row ``i`` is output number ``pos[i] + 1 - prompt_len``,
       so with ``min_lens[r] = prompt_len + min_tokens`` the stop tokens are
       masked for exactly the first ``min_tokens`` outputs.

    Rows whose request uses none of the three are not touched. Every logit
    is read and written by one thread only, so the result does not depend on
    thread timing (vLLM 0.20's kernel can lose the allowed logits). Ids
    outside ``[0, vocab_size)`` match no token and are ignored.

    Parameters
    ----------
    logits: torch.Tensor
        ``[num_tokens, vocab_size]`` float32, row stride free, column stride 1.
    idx_mapping: torch.Tensor
        ``[num_tokens]`` int32, the request row of each logit row.
    pos: torch.Tensor
        ``[num_tokens]`` int32 or int64, position of the token each logit row
        follows (the drawn token lands at ``pos + 1``).
    num_allowed, num_bias, num_stop, min_lens: torch.Tensor
        ``[max_num_reqs]`` int32 per-request counts and ``prompt_len + min_tokens``.
    allowed_ids, stop_ids: torch.Tensor
        ``[max_num_reqs, capacity]`` int32; the first ``num_*[r]`` entries of
        row ``r`` sorted ascending (duplicates allowed).
    bias_ids, bias: torch.Tensor
        ``[max_num_reqs, capacity]`` int32 ids, sorted ascending and unique
        within a row, and float32 biases aligned with them.
    check_inputs: bool
        False skips the checks below (host time only): for a caller that
        passes the same buffers every step and had them checked once.

    Returns
    -------
    torch.Tensor
        ``logits``, modified.

    Examples
    --------
    >>> logits = torch.zeros(1, 6, device="cuda")
    >>> one, zero = torch.ones(1, dtype=torch.int32), torch.zeros(1, dtype=torch.int32)
    >>> ids = lambda *t: torch.tensor([t], dtype=torch.int32, device="cuda")
    >>> apply_logit_bias_(
    ...     logits, zero.cuda(), torch.zeros(1, dtype=torch.int64, device="cuda"),
    ...     torch.tensor([2], dtype=torch.int32, device="cuda"), ids(1, 4),  # allowed {1, 4}
    ...     one.cuda(), ids(4), torch.tensor([[0.5]], device="cuda"),     # bias +0.5 on 4
    ...     zero.cuda(), zero.cuda(), ids(0),                              # no min tokens
    ... )
    tensor([[-inf, 0.0000, -inf, -inf, 0.5000, -inf]], device='cuda:0')
    """
    if check_inputs:
        _check_inputs(
            logits, idx_mapping, pos, num_allowed, allowed_ids, num_bias, bias_ids,
            bias, min_lens, num_stop, stop_ids,
        )
    num_tokens, vocab_size = logits.shape
    if num_tokens == 0:
        return logits
    _logit_bias_kernel[(num_tokens, cdiv(vocab_size, _BLOCK_V))](
        logits,
        logits.stride(0),
        vocab_size,
        idx_mapping,
        pos,
        num_allowed,
        allowed_ids,
        allowed_ids.stride(0),
        num_bias,
        bias_ids,
        bias_ids.stride(0),
        bias,
        bias.stride(0),
        min_lens,
        num_stop,
        stop_ids,
        stop_ids.stride(0),
        ALLOWED_STEPS=_search_steps(allowed_ids.shape[1]),
        BIAS_STEPS=_search_steps(bias_ids.shape[1]),
        STOP_STEPS=_search_steps(stop_ids.shape[1]),
        BLOCK_V=_BLOCK_V,
    )
    return logits


def _check_inputs(
    logits, idx_mapping, pos, num_allowed, allowed_ids, num_bias, bias_ids, bias,
    min_lens, num_stop, stop_ids,
) -> None:
    if logits.dim() != 2 or logits.dtype != torch.float32 or logits.stride(1) != 1:
        raise ValueError(
            f"logits must be [num_tokens, vocab_size] float32 with unit column "
            f"stride, got {tuple(logits.shape)} {logits.dtype} stride {logits.stride()}"
        )
    check_same_device(
        logits.device, idx_mapping=idx_mapping, pos=pos, num_allowed=num_allowed,
        allowed_ids=allowed_ids, num_bias=num_bias, bias_ids=bias_ids, bias=bias,
        min_lens=min_lens, num_stop=num_stop, stop_ids=stop_ids,
    )
    num_tokens = logits.shape[0]
    for name, tensor in (("idx_mapping", idx_mapping), ("pos", pos)):
        if tensor.shape != (num_tokens,):
            raise ValueError(f"{name} must be [{num_tokens}], got {tuple(tensor.shape)}")
    if idx_mapping.dtype != torch.int32 or pos.dtype not in (torch.int32, torch.int64):
        raise ValueError("idx_mapping must be int32 and pos int32 or int64")
    max_num_reqs = num_allowed.shape[0]
    per_request = dict(num_allowed=num_allowed, num_bias=num_bias, min_lens=min_lens,
                       num_stop=num_stop)
    for name, tensor in per_request.items():
        if tensor.shape != (max_num_reqs,) or tensor.dtype != torch.int32:
            raise ValueError(f"{name} must be [{max_num_reqs}] int32")
    lists = dict(allowed_ids=allowed_ids, bias_ids=bias_ids, stop_ids=stop_ids)
    for name, tensor in lists.items():
        if tensor.dim() != 2 or tensor.shape[0] != max_num_reqs or tensor.dtype != torch.int32:
            raise ValueError(f"{name} must be [{max_num_reqs}, capacity] int32")
        if tensor.stride(1) != 1:
            raise ValueError(f"{name} must have unit column stride")
    if bias.shape != bias_ids.shape or bias.dtype != torch.float32 or bias.stride(1) != 1:
        raise ValueError("bias must be float32 with bias_ids' shape and unit column stride")
