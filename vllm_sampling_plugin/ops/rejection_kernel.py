"""The rejection-sampling kernel of speculative decoding and its packed launcher.

One kernel, ``_rejection_step_kernel``, serves every mode: standard
(``strict`` / ``probabilistic`` in vLLM 0.20) and synthetic, with or without
draft logits, in FP32 or FP64. It is launched once per draft position
(``step = 0 .. K``) over a grid of (vocabulary block, request). Launch ``step``
first judges draft ``step - 1`` from the partial sums the previous launch left
behind, and then does the one piece of row work the request still needs:

* the block pass over target row ``step`` (max, argmax and summed exponentials
  per block; the same for the draft row) while every draft so far is accepted;
* the residual resample of row ``step - 1`` when that draft was just rejected;
* the bonus sample of row ``step`` when it follows the last accepted draft.

A request therefore never reads a row beyond its first rejection: the memory
traffic of a launch follows the acceptance pattern, in standard and synthetic
mode alike. ``_emit_kernel`` then writes the accepted drafts, the corrected or
bonus token and the ``-1`` padding.

Random streams (every key is ``request_key(seed, position of the logit)``)
--------------------------------------------------------------------------
* acceptance uniform of draft ``i``: counter ``_ACCEPT_COUNTER`` under the key
  of logit ``i`` (``uniform`` of ``random.py``);
* residual resample at a rejected logit: the Gumbel noise of ``random.py``
  for tokens shifted by ``_RESIDUAL_STREAM``, so it is independent of the
  acceptance uniform and of the plain Gumbel stream a drafter may have used to
  pick the draft at that position (reusing that noise would bias the resample
  towards the rejected draft);
* bonus token: the plain Gumbel stream of the sampler (counters ``[0, V)``),
  so with every draft accepted the bonus is what the sampler draws there.
"""

import torch
import triton
import triton.language as tl

from .random import gumbel_block, request_key, uniform

# Partial sums are combined per vocabulary block, so the float rounding of a
# row depends on the block size. It is a function of the vocabulary only,
# never of the batch, which keeps every request's result batch invariant.
_MAX_VOCAB_BLOCK = 8192
_MIN_VOCAB_BLOCK = 16
# Philox counters under the key of a logit; the plain Gumbel stream uses
# [0, V) (FP64) or [0, V / 4) (FP32), the residual one [2**30, 2**30 + V) or
# [2**28, 2**28 + V / 4), so the three never meet while V < 2**30 - 1.
_RESIDUAL_STREAM = 1 << 30
_ACCEPT_COUNTER = (1 << 31) - 1
MAX_VOCAB_SIZE = _RESIDUAL_STREAM - 1
_FLOAT32_MAX = 3.4028234663852886e38


def vocab_block_size(vocab_size: int) -> int:
    """Block size of the vocabulary split: at least four blocks per row when V is small."""
    quarter = triton.next_power_of_2(triton.cdiv(vocab_size, 4))
    return min(_MAX_VOCAB_BLOCK, max(_MIN_VOCAB_BLOCK, quarter))


@triton.jit
def _sanitize(logits):
    # NaN never wins (it counts as -inf) and +inf becomes the largest finite
    # float, so log-sum-exp, log-probabilities and noisy scores stay NaN-free.
    return tl.where(logits == logits, tl.minimum(logits, _FLOAT32_MAX), float("-inf"))


@triton.jit
def _load_target(row_ptr, offsets, mask, temp, APPLY_TEMPERATURE: tl.constexpr):
    logits = tl.load(row_ptr + offsets, mask=mask, other=float("-inf")).to(tl.float32)
    if APPLY_TEMPERATURE:
        # Division, not a reciprocal multiply: bit-identical to vLLM's temperature kernel.
        logits = logits / tl.where(temp == 0.0, 1.0, temp)
    return _sanitize(logits)


@triton.jit
def _load_draft(row_ptr, offsets, mask):
    logits = tl.load(row_ptr + offsets, mask=mask, other=float("-inf")).to(tl.float32)
    return _sanitize(logits)


@triton.jit
def _to_score(x, USE_FP64: tl.constexpr):
    if USE_FP64:
        return x.to(tl.float64)
    else:
        return x.to(tl.float32)


@triton.jit
def _row_logsumexp(
    max_ptr,  # [num_blocks] of one row
    sumexp_ptr,  # [num_blocks] of one row
    num_blocks,
    NUM_BLOCKS_PAD: tl.constexpr,
):
    blocks = tl.arange(0, NUM_BLOCKS_PAD)
    mask = blocks < num_blocks
    maxes = tl.load(max_ptr + blocks, mask=mask, other=float("-inf"))
    sumexps = tl.load(sumexp_ptr + blocks, mask=mask, other=0.0)
    row_max = tl.max(maxes, axis=0)
    # Blocks without a finite logit contribute nothing (and no NaN from -inf - -inf).
    scales = tl.exp(tl.where(maxes > float("-inf"), maxes - row_max, float("-inf")))
    return row_max + tl.log(tl.sum(sumexps * scales, axis=0))


@triton.jit
def _row_argmax(
    max_ptr,  # [num_blocks] of one row
    argmax_ptr,  # [num_blocks] of one row
    num_blocks,
    NUM_BLOCKS_PAD: tl.constexpr,
):
    blocks = tl.arange(0, NUM_BLOCKS_PAD)
    maxes = tl.load(max_ptr + blocks, mask=blocks < num_blocks, other=float("-inf"))
    # Ties go to the lowest block, and within a block to the lowest token: torch.argmax.
    return tl.load(argmax_ptr + tl.argmax(maxes, axis=0))


@triton.jit
def _draft_accepted(
    row,
    logit_idx,
    state_idx,
    seed,
    temp,
    row_stats,  # offset of this row's partial sums
    target_max_ptr,
    target_argmax_ptr,
    target_sumexp_ptr,
    draft_max_ptr,
    draft_sumexp_ptr,
    target_logits_ptr,
    target_logits_stride,
    draft_logits_ptr,
    draft_logits_stride_0,
    draft_logits_stride_1,
    draft_tokens_ptr,
    pos_ptr,
    conditional_rates_ptr,
    vocab_size,
    num_blocks,
    NUM_BLOCKS_PAD: tl.constexpr,
    SYNTHETIC_MODE: tl.constexpr,
    HAS_DRAFT_LOGITS: tl.constexpr,
    USE_FP64: tl.constexpr,
    APPLY_TEMPERATURE: tl.constexpr,
):
    # Draft `row` is the input token of logit `row + 1`.
    draft = tl.load(draft_tokens_ptr + logit_idx + 1).to(tl.int32)
    in_vocab = (draft >= 0) & (draft < vocab_size)
    key = request_key(seed, tl.load(pos_ptr + logit_idx))
    u = uniform(key, tl.full([], _ACCEPT_COUNTER, tl.int32), USE_FP64)
    if SYNTHETIC_MODE:
        # The configured conditional rate decides, whatever the tokens. The
        # row work that dominates the cost (loading the target and draft rows,
        # their log-sum-exp, the residual resample) is the block pass's and is
        # done exactly as in standard mode, so synthetic runs time like real
        # ones with the same acceptance; only this O(num_blocks) test differs.
        accepted = u < tl.load(conditional_rates_ptr + row)
    else:
        if temp == 0.0:
            target_argmax = _row_argmax(
                target_max_ptr + row_stats,
                target_argmax_ptr + row_stats,
                num_blocks,
                NUM_BLOCKS_PAD,
            )
            accepted = target_argmax == draft
        else:
            target_logit = _load_target(
                target_logits_ptr + logit_idx.to(tl.int64) * target_logits_stride,
                draft,
                in_vocab,
                temp,
                APPLY_TEMPERATURE,
            )
            log_p = target_logit - _row_logsumexp(
                target_max_ptr + row_stats,
                target_sumexp_ptr + row_stats,
                num_blocks,
                NUM_BLOCKS_PAD,
            )
            if HAS_DRAFT_LOGITS:
                draft_logit = _load_draft(
                    draft_logits_ptr
                    + state_idx.to(tl.int64) * draft_logits_stride_0
                    + row * draft_logits_stride_1,
                    draft,
                    in_vocab,
                )
                log_q = draft_logit - _row_logsumexp(
                    draft_max_ptr + row_stats,
                    draft_sumexp_ptr + row_stats,
                    num_blocks,
                    NUM_BLOCKS_PAD,
                )
            else:
                # An n-gram draft is a point mass: q(draft) = 1.
                log_q = 0.0
            # u < min(1, p / q) in log space. A row without any finite logit
            # gives log_p = NaN, which rejects.
            accepted = log_p > tl.log(u) + log_q
    return accepted & in_vocab


@triton.jit(do_not_specialize=["step"])
def _rejection_step_kernel(
    # [num_reqs, num_blocks]: per-block winners of the emitted (corrected or bonus) row
    winner_value_ptr,
    winner_token_ptr,
    # [num_reqs, num_blocks]: per-block winners drawn from p itself, used when
    # the residual has no mass left
    fallback_value_ptr,
    fallback_token_ptr,
    # [num_reqs, num_spec_steps + 1]: row `step` reached (drafts 0..step-1 accepted)
    reached_ptr,
    # [num_reqs]
    num_accepted_ptr,
    # [num_reqs, num_spec_steps, num_blocks]
    target_max_ptr,
    target_argmax_ptr,
    target_sumexp_ptr,
    draft_max_ptr,
    draft_sumexp_ptr,
    # [num_logits, V]
    target_logits_ptr,
    target_logits_stride,
    # [max_num_reqs, num_spec_steps, V]
    draft_logits_ptr,
    draft_logits_stride_0,
    draft_logits_stride_1,
    # [num_logits]: logit j + 1 of a request holds its draft j
    draft_tokens_ptr,
    # [num_reqs + 1]
    cu_num_logits_ptr,
    # [num_reqs]
    idx_mapping_ptr,
    # [num_logits]
    pos_ptr,
    # [max_num_reqs]
    temperature_ptr,
    # [max_num_reqs]
    seeds_ptr,
    # [num_spec_steps]
    conditional_rates_ptr,
    step,
    vocab_size,
    num_spec_steps,
    num_blocks,
    BLOCK: tl.constexpr,
    NUM_BLOCKS_PAD: tl.constexpr,
    SYNTHETIC_MODE: tl.constexpr,
    HAS_DRAFT_LOGITS: tl.constexpr,
    USE_FP64: tl.constexpr,
    APPLY_TEMPERATURE: tl.constexpr,
):
    block_idx = tl.program_id(0)
    req_idx = tl.program_id(1)
    start = tl.load(cu_num_logits_ptr + req_idx)
    num_logits = tl.load(cu_num_logits_ptr + req_idx + 1) - start
    num_drafts = tl.minimum(num_logits - 1, num_spec_steps)
    state_idx = tl.load(idx_mapping_ptr + req_idx)
    temp = tl.load(temperature_ptr + state_idx).to(tl.float32)
    seed = tl.load(seeds_ptr + state_idx)
    reached_row_ptr = reached_ptr + req_idx * (num_spec_steps + 1)
    stats_ptr_offset = req_idx * num_spec_steps * num_blocks

    # Every block of the request judges draft step - 1 itself, from the
    # partial sums of the previous launch: the inputs are the same, so is the
    # verdict, and no block waits for another.
    reached = step == 0
    rejected = step < 0
    if step > 0:
        judged = step - 1
        if (tl.load(reached_row_ptr + judged) != 0) & (judged < num_drafts):
            accepted = _draft_accepted(
                judged,
                start + judged,
                state_idx,
                seed,
                temp,
                stats_ptr_offset + judged * num_blocks,
                target_max_ptr,
                target_argmax_ptr,
                target_sumexp_ptr,
                draft_max_ptr,
                draft_sumexp_ptr,
                target_logits_ptr,
                target_logits_stride,
                draft_logits_ptr,
                draft_logits_stride_0,
                draft_logits_stride_1,
                draft_tokens_ptr,
                pos_ptr,
                conditional_rates_ptr,
                vocab_size,
                num_blocks,
                NUM_BLOCKS_PAD,
                SYNTHETIC_MODE,
                HAS_DRAFT_LOGITS,
                USE_FP64,
                APPLY_TEMPERATURE,
            )
            reached = accepted
            rejected = accepted == 0
    is_bonus = reached & (step == num_drafts)
    if block_idx == 0:
        tl.store(reached_row_ptr + step, reached.to(tl.int8))
        if rejected:
            tl.store(num_accepted_ptr + req_idx, step - 1)
        if is_bonus:
            tl.store(num_accepted_ptr + req_idx, step)

    offsets = block_idx * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < vocab_size
    winner_offset = req_idx * num_blocks + block_idx
    if rejected:
        row = step - 1
        logit_idx = start + row
        row_stats = stats_ptr_offset + row * num_blocks
        if temp == 0.0:
            # The corrected token is the target argmax, kept by the block pass.
            value = _to_score(tl.load(target_max_ptr + row_stats + block_idx), USE_FP64)
            token = tl.load(target_argmax_ptr + row_stats + block_idx)
            tl.store(winner_value_ptr + winner_offset, value)
            tl.store(winner_token_ptr + winner_offset, token)
            tl.store(fallback_value_ptr + winner_offset, value)
            tl.store(fallback_token_ptr + winner_offset, token)
        else:
            logits = _load_target(
                target_logits_ptr + logit_idx.to(tl.int64) * target_logits_stride,
                offsets,
                mask,
                temp,
                APPLY_TEMPERATURE,
            )
            key = request_key(seed, tl.load(pos_ptr + logit_idx))
            noise = gumbel_block(key, block_idx * BLOCK + _RESIDUAL_STREAM, BLOCK, USE_FP64)
            if HAS_DRAFT_LOGITS:
                # residual = max(0, p - q); in log space
                # log(p - q) = log p + log(1 - q / p) where q < p.
                log_p = logits - _row_logsumexp(
                    target_max_ptr + row_stats,
                    target_sumexp_ptr + row_stats,
                    num_blocks,
                    NUM_BLOCKS_PAD,
                )
                draft_logits = _load_draft(
                    draft_logits_ptr
                    + state_idx.to(tl.int64) * draft_logits_stride_0
                    + row * draft_logits_stride_1,
                    offsets,
                    mask,
                )
                log_q = draft_logits - _row_logsumexp(
                    draft_max_ptr + row_stats,
                    draft_sumexp_ptr + row_stats,
                    num_blocks,
                    NUM_BLOCKS_PAD,
                )
                ratio = tl.exp(log_q - log_p)
                residual = tl.where(ratio < 1.0, log_p + tl.log(1.0 - ratio), float("-inf"))
            else:
                # A point-mass draft leaves p without the rejected token.
                rejected_draft = tl.load(draft_tokens_ptr + logit_idx + 1).to(tl.int32)
                residual = tl.where(offsets == rejected_draft, float("-inf"), logits)
            value, idx = tl.max(_to_score(residual, USE_FP64) + noise, axis=0, return_indices=True)
            tl.store(winner_value_ptr + winner_offset, value)
            tl.store(winner_token_ptr + winner_offset, block_idx * BLOCK + idx)
            value, idx = tl.max(_to_score(logits, USE_FP64) + noise, axis=0, return_indices=True)
            tl.store(fallback_value_ptr + winner_offset, value)
            tl.store(fallback_token_ptr + winner_offset, block_idx * BLOCK + idx)
    elif is_bonus:
        logit_idx = start + step
        logits = _to_score(
            _load_target(
                target_logits_ptr + logit_idx.to(tl.int64) * target_logits_stride,
                offsets,
                mask,
                temp,
                APPLY_TEMPERATURE,
            ),
            USE_FP64,
        )
        if temp != 0.0:
            key = request_key(seed, tl.load(pos_ptr + logit_idx))
            logits += gumbel_block(key, block_idx * BLOCK, BLOCK, USE_FP64)
        value, idx = tl.max(logits, axis=0, return_indices=True)
        tl.store(winner_value_ptr + winner_offset, value)
        tl.store(winner_token_ptr + winner_offset, block_idx * BLOCK + idx)
        tl.store(fallback_value_ptr + winner_offset, value)
        tl.store(fallback_token_ptr + winner_offset, block_idx * BLOCK + idx)
    elif reached:
        # Block pass over the row that verifies draft `step`.
        logit_idx = start + step
        row_stats = stats_ptr_offset + step * num_blocks + block_idx
        logits = _load_target(
            target_logits_ptr + logit_idx.to(tl.int64) * target_logits_stride,
            offsets,
            mask,
            temp,
            APPLY_TEMPERATURE,
        )
        block_max, block_argmax = tl.max(logits, axis=0, return_indices=True)
        block_sumexp = tl.where(block_max > float("-inf"), tl.sum(tl.exp(logits - block_max), axis=0), 0.0)
        tl.store(target_max_ptr + row_stats, block_max)
        tl.store(target_argmax_ptr + row_stats, block_idx * BLOCK + block_argmax)
        tl.store(target_sumexp_ptr + row_stats, block_sumexp)
        if HAS_DRAFT_LOGITS:
            # Greedy rows compare with the argmax only and never need q.
            if temp != 0.0:
                draft_logits = _load_draft(
                    draft_logits_ptr
                    + state_idx.to(tl.int64) * draft_logits_stride_0
                    + step * draft_logits_stride_1,
                    offsets,
                    mask,
                )
                draft_max = tl.max(draft_logits, axis=0)
                draft_sumexp = tl.where(
                    draft_max > float("-inf"), tl.sum(tl.exp(draft_logits - draft_max), axis=0), 0.0
                )
                tl.store(draft_max_ptr + row_stats, draft_max)
                tl.store(draft_sumexp_ptr + row_stats, draft_sumexp)


@triton.jit
def _emit_kernel(
    # [num_reqs, num_spec_steps + 1]
    sampled_ptr,
    sampled_stride,
    # [num_reqs]
    num_sampled_ptr,
    # [num_reqs, num_blocks]
    winner_value_ptr,
    winner_token_ptr,
    fallback_value_ptr,
    fallback_token_ptr,
    # [num_reqs]
    num_accepted_ptr,
    # [num_logits]
    draft_tokens_ptr,
    # [num_reqs + 1]
    cu_num_logits_ptr,
    num_spec_steps,
    num_blocks,
    NUM_BLOCKS_PAD: tl.constexpr,
    OUT_PAD: tl.constexpr,
):
    req_idx = tl.program_id(0)
    num_accepted = tl.load(num_accepted_ptr + req_idx)
    start = tl.load(cu_num_logits_ptr + req_idx)

    blocks = tl.arange(0, NUM_BLOCKS_PAD)
    mask = blocks < num_blocks
    values = tl.load(winner_value_ptr + req_idx * num_blocks + blocks, mask=mask, other=float("-inf"))
    if tl.max(values, axis=0) > float("-inf"):
        token = tl.load(winner_token_ptr + req_idx * num_blocks + tl.argmax(values, axis=0))
    else:
        # Rounding can leave a rejected row's residual without mass (or, in
        # synthetic mode, p == q); p itself is the only sensible choice then.
        # A row without any finite logit lands here too and emits token 0.
        values = tl.load(fallback_value_ptr + req_idx * num_blocks + blocks, mask=mask, other=float("-inf"))
        token = tl.load(fallback_token_ptr + req_idx * num_blocks + tl.argmax(values, axis=0))

    cols = tl.arange(0, OUT_PAD)
    drafts = tl.load(draft_tokens_ptr + start + 1 + cols, mask=cols < num_accepted, other=0)
    out = tl.where(cols < num_accepted, drafts.to(tl.int64), tl.where(cols == num_accepted, token.to(tl.int64), -1))
    tl.store(sampled_ptr + req_idx * sampled_stride + cols, out, mask=cols <= num_spec_steps)
    tl.store(num_sampled_ptr + req_idx, num_accepted + 1)


def rejection_sample_packed(
    # [num_logits, V]
    target_logits: torch.Tensor,
    # [num_logits]
    draft_tokens: torch.Tensor,
    # [num_reqs + 1]
    cu_num_logits: torch.Tensor,
    # [num_reqs]
    idx_mapping: torch.Tensor,
    # [num_logits]
    pos: torch.Tensor,
    # [max_num_reqs]
    temperature: torch.Tensor,
    # [max_num_reqs]
    seeds: torch.Tensor,
    num_speculative_steps: int,
    # [max_num_reqs, num_speculative_steps, V]
    draft_logits: torch.Tensor | None = None,
    # [num_speculative_steps]
    synthetic_conditional_rates: torch.Tensor | None = None,
    *,
    use_fp64: bool = False,
    apply_temperature: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rejection sampling on the V2 runner's packed layout (no host sync).

    The inputs are the ones vLLM 0.20's ``RejectionSampler.__call__`` holds:
    request ``r`` owns logits ``cu_num_logits[r] .. cu_num_logits[r + 1] - 1``
    (its drafts, ``num_logits_r - 1 <= num_speculative_steps`` of them, then the
    bonus position); ``draft_tokens`` is ``input_ids[logits_indices]``, whose
    entry ``cu_num_logits[r] + j + 1`` is draft ``j`` of request ``r``;
    ``idx_mapping[r]`` is the request's state slot in ``temperature``,
    ``seeds`` and ``draft_logits``; ``pos`` is the position of every logit.

    Args:
        target_logits: float ``[num_logits, V]``. With ``apply_temperature=False``
            (the runner) these are the processed logits of
            ``Sampler.apply_sampling_params``, temperature already applied;
            with ``True`` the kernel divides rows with temperature > 0.
        draft_tokens: int32/int64 ``[num_logits]``. Ids outside ``[0, V)`` are
            never accepted.
        cu_num_logits: int32 ``[num_reqs + 1]``.
        idx_mapping: int32/int64 ``[num_reqs]``.
        pos: int64 ``[num_logits]``.
        temperature: float32 ``[max_num_reqs]``; 0 means greedy.
        seeds: int64 ``[max_num_reqs]``.
        num_speculative_steps: K, the width of the output minus one.
        draft_logits: None for n-gram drafts (a point mass: accept with
            probability p(draft)), else float ``[max_num_reqs, K, V]`` (Eagle's
            temperature-scaled draft logits, indexed by state slot and step),
            normalised by the kernel.
        synthetic_conditional_rates: None for standard mode; float32 ``[K]``
            *conditional* rates (see ``unconditional_to_conditional_rates``)
            for synthetic mode.
        use_fp64: FP64 acceptance uniforms and resampling noise.
        apply_temperature: see ``target_logits``.

    Returns:
        ``(sampled, num_sampled)``: int64 ``[num_reqs, K + 1]`` holding the
        accepted drafts, then the corrected or bonus token, then ``-1``; and a
        fresh int32 ``[num_reqs]`` with the number of tokens per row (vLLM
        edits it in place).
    """
    if target_logits.dim() != 2 or not target_logits.is_floating_point():
        raise ValueError(f"target_logits must be a 2-D float tensor, got {tuple(target_logits.shape)} {target_logits.dtype}")
    num_logits, vocab_size = target_logits.shape
    if vocab_size > MAX_VOCAB_SIZE:
        raise ValueError(f"target_logits: vocabulary of {vocab_size} exceeds {MAX_VOCAB_SIZE}")
    if num_speculative_steps < 1:
        raise ValueError(f"num_speculative_steps must be >= 1, got {num_speculative_steps}")
    num_reqs = cu_num_logits.shape[0] - 1
    if idx_mapping.shape != (num_reqs,):
        raise ValueError(f"idx_mapping must have shape ({num_reqs},), got {tuple(idx_mapping.shape)}")
    if draft_tokens.shape != (num_logits,) or pos.shape != (num_logits,):
        raise ValueError("draft_tokens and pos must have one entry per logit")
    if draft_logits is not None and (
        draft_logits.dim() != 3
        or draft_logits.shape[1] < num_speculative_steps
        or draft_logits.shape[2] != vocab_size
    ):
        raise ValueError(f"draft_logits must be [max_num_reqs, {num_speculative_steps}, {vocab_size}], got {tuple(draft_logits.shape)}")
    if synthetic_conditional_rates is not None and synthetic_conditional_rates.shape != (num_speculative_steps,):
        raise ValueError(f"synthetic_conditional_rates must have shape ({num_speculative_steps},)")

    device = target_logits.device
    sampled = torch.empty(num_reqs, num_speculative_steps + 1, dtype=torch.int64, device=device)
    num_sampled = torch.empty(num_reqs, dtype=torch.int32, device=device)
    if num_reqs == 0:
        return sampled, num_sampled
    if target_logits.stride(1) != 1:
        target_logits = target_logits.contiguous()
    if draft_logits is not None and draft_logits.stride(2) != 1:
        draft_logits = draft_logits.contiguous()

    block = vocab_block_size(vocab_size)
    num_blocks = triton.cdiv(vocab_size, block)
    num_blocks_pad = triton.next_power_of_2(num_blocks)
    score_dtype = torch.float64 if use_fp64 else torch.float32
    winner_value = torch.empty(num_reqs, num_blocks, dtype=score_dtype, device=device)
    winner_token = torch.empty(num_reqs, num_blocks, dtype=torch.int32, device=device)
    fallback_value = torch.empty_like(winner_value)
    fallback_token = torch.empty_like(winner_token)
    reached = torch.empty(num_reqs, num_speculative_steps + 1, dtype=torch.int8, device=device)
    num_accepted = torch.empty(num_reqs, dtype=torch.int32, device=device)
    stats_shape = (num_reqs, num_speculative_steps, num_blocks)
    target_max = torch.empty(stats_shape, dtype=torch.float32, device=device)
    target_argmax = torch.empty(stats_shape, dtype=torch.int32, device=device)
    target_sumexp = torch.empty(stats_shape, dtype=torch.float32, device=device)
    has_draft_logits = draft_logits is not None
    draft_max = torch.empty_like(target_max) if has_draft_logits else target_max
    draft_sumexp = torch.empty_like(target_max) if has_draft_logits else target_max

    num_warps = 8 if block >= 4096 else 4
    for step in range(num_speculative_steps + 1):
        _rejection_step_kernel[(num_blocks, num_reqs)](
            winner_value,
            winner_token,
            fallback_value,
            fallback_token,
            reached,
            num_accepted,
            target_max,
            target_argmax,
            target_sumexp,
            draft_max,
            draft_sumexp,
            target_logits,
            target_logits.stride(0),
            draft_logits if has_draft_logits else target_logits,
            draft_logits.stride(0) if has_draft_logits else 0,
            draft_logits.stride(1) if has_draft_logits else 0,
            draft_tokens,
            cu_num_logits,
            idx_mapping,
            pos,
            temperature,
            seeds,
            synthetic_conditional_rates if synthetic_conditional_rates is not None else temperature,
            step,
            vocab_size,
            num_speculative_steps,
            num_blocks,
            BLOCK=block,
            NUM_BLOCKS_PAD=num_blocks_pad,
            SYNTHETIC_MODE=synthetic_conditional_rates is not None,
            HAS_DRAFT_LOGITS=has_draft_logits,
            USE_FP64=use_fp64,
            APPLY_TEMPERATURE=apply_temperature,
            num_warps=num_warps,
        )
    _emit_kernel[(num_reqs,)](
        sampled,
        sampled.stride(0),
        num_sampled,
        winner_value,
        winner_token,
        fallback_value,
        fallback_token,
        num_accepted,
        draft_tokens,
        cu_num_logits,
        num_speculative_steps,
        num_blocks,
        NUM_BLOCKS_PAD=num_blocks_pad,
        OUT_PAD=triton.next_power_of_2(num_speculative_steps + 1),
        num_warps=1,
    )
    return sampled, num_sampled
