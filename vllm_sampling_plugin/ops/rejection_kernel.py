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

# A program covers one vocabulary block, in chunks that bound its registers
# (72 per thread on sm_90 with 4 warps, so 7 programs fit on an SM). Partial
# sums are combined per chunk and per block, so the float rounding of a row
# depends on both sizes: they are functions of the vocabulary only, never of
# the batch, which keeps every request's result batch invariant. Sampling
# takes maxima only, so its (smaller) chunk does not change any result.
_MAX_VOCAB_BLOCK = 8192
_MIN_VOCAB_BLOCK = 16
_MAX_CHUNK = 2048
_MAX_SAMPLE_CHUNK = 512
# Philox counters under the key of a logit; the plain Gumbel stream uses
# [0, V) (FP64) or [0, V / 4) (FP32), the residual one [2**30, 2**30 + V) or
# [2**28, 2**28 + V / 4), so the three never meet while V < 2**30 - 1.
_RESIDUAL_STREAM = tl.constexpr(1 << 30)
_ACCEPT_COUNTER = tl.constexpr((1 << 31) - 1)
MAX_VOCAB_SIZE = (1 << 30) - 1
_FLOAT32_MAX = tl.constexpr(3.4028234663852886e38)


def vocab_split(vocab_size: int) -> tuple[int, int, int]:
    """(block, chunk, sample chunk) sizes; at least four blocks when V is small."""
    quarter = triton.next_power_of_2(triton.cdiv(vocab_size, 4))
    block = min(_MAX_VOCAB_BLOCK, max(_MIN_VOCAB_BLOCK, quarter))
    return block, min(block, _MAX_CHUNK), min(block, _MAX_SAMPLE_CHUNK)


@triton.jit
def _load_logits(row_ptr, offsets, mask, temp, APPLY_TEMPERATURE: tl.constexpr):
    logits = tl.load(row_ptr + offsets, mask=mask, other=float("-inf")).to(tl.float32)
    if APPLY_TEMPERATURE:
        # Division, not a reciprocal multiply: bit-identical to vLLM's temperature kernel.
        logits = logits / tl.where(temp == 0.0, 1.0, temp)
    # NaN never wins (it counts as -inf) and +inf becomes the largest finite
    # float, so log-sum-exp, log-probabilities and noisy scores stay NaN-free.
    return tl.where(logits == logits, tl.minimum(logits, _FLOAT32_MAX), float("-inf"))


@triton.jit
def _block_stats(
    row_ptr,  # [V]
    block_start,
    vocab_size,
    temp,
    BLOCK: tl.constexpr,
    CHUNK: tl.constexpr,
    APPLY_TEMPERATURE: tl.constexpr,
):
    """Max, first argmax and sum of exp(logit - max) over one vocabulary block."""
    block_max = tl.full([], float("-inf"), tl.float32)
    block_argmax = block_start
    block_sumexp = tl.zeros([], tl.float32)
    for chunk in range(BLOCK // CHUNK):
        chunk_start = block_start + chunk * CHUNK
        offsets = chunk_start + tl.arange(0, CHUNK)
        logits = _load_logits(row_ptr, offsets, offsets < vocab_size, temp, APPLY_TEMPERATURE)
        chunk_max, chunk_argmax = tl.max(logits, axis=0, return_indices=True)
        new_max = tl.maximum(block_max, chunk_max)
        # While nothing is finite the sum stays 0 (and avoids -inf - -inf).
        block_sumexp = tl.where(
            new_max > float("-inf"),
            block_sumexp * tl.exp(block_max - new_max) + tl.sum(tl.exp(logits - new_max), axis=0),
            0.0,
        )
        block_argmax = tl.where(chunk_max > block_max, chunk_start + chunk_argmax, block_argmax)
        block_max = new_max
    return block_max, block_argmax, block_sumexp


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
def _draft_accepted(
    key,
    draft,
    row,
    temp,
    target_lse,
    draft_lse,
    row_stats,  # [num_blocks]: offset of this row's partial sums
    target_max_ptr,
    target_argmax_ptr,
    target_row_ptr,  # [V]
    draft_row_ptr,  # [V]
    conditional_rates_ptr,
    vocab_size,
    num_blocks,
    NUM_BLOCKS_PAD: tl.constexpr,
    SYNTHETIC_MODE: tl.constexpr,
    HAS_DRAFT_LOGITS: tl.constexpr,
    USE_FP64: tl.constexpr,
    APPLY_TEMPERATURE: tl.constexpr,
):
    in_vocab = (draft >= 0) & (draft < vocab_size)
    accept_counter = tl.full([], _ACCEPT_COUNTER, tl.int32)
    if SYNTHETIC_MODE:
        # The configured conditional rate decides, whatever the tokens. The
        # row work that dominates the cost (loading the target and draft rows,
        # their log-sum-exp, the residual resample) is done exactly as in
        # standard mode, so synthetic runs take the time of real runs with the
        # same acceptance; only this O(num_blocks) test differs.
        accepted = uniform(key, accept_counter, USE_FP64) < tl.load(conditional_rates_ptr + row)
    elif temp == 0.0:
        blocks = tl.arange(0, NUM_BLOCKS_PAD)
        maxes = tl.load(
            target_max_ptr + row_stats + blocks, mask=blocks < num_blocks, other=float("-inf")
        )
        # Ties go to the lowest block, and within a block to the lowest token: torch.argmax.
        target_argmax = tl.load(target_argmax_ptr + row_stats + tl.argmax(maxes, axis=0))
        accepted = target_argmax == draft
    else:
        log_p = _load_logits(target_row_ptr, draft, in_vocab, temp, APPLY_TEMPERATURE) - target_lse
        if HAS_DRAFT_LOGITS:
            log_q = _load_logits(draft_row_ptr, draft, in_vocab, temp, False) - draft_lse
        else:
            # An n-gram draft is a point mass: q(draft) = 1.
            log_q = 0.0
        # u < min(1, p / q) in log space. A row without any finite logit gives
        # log_p = NaN, which rejects.
        accepted = log_p > tl.log(uniform(key, accept_counter, USE_FP64)) + log_q
    return accepted & in_vocab


@triton.jit
def _corrected_block_winners(
    key,
    draft,
    temp,
    target_lse,
    draft_lse,
    target_row_ptr,  # [V]
    draft_row_ptr,  # [V]
    block_start,
    vocab_size,
    BLOCK: tl.constexpr,
    SAMPLE_CHUNK: tl.constexpr,
    HAS_DRAFT_LOGITS: tl.constexpr,
    USE_FP64: tl.constexpr,
    APPLY_TEMPERATURE: tl.constexpr,
):
    """Gumbel-max winners of one block for a rejected draft (temperature > 0).

    Returns (value, token) of the residual max(0, p - q) and of p itself; the
    latter is used only should the residual have no mass anywhere.
    """
    score_dtype = tl.float64 if USE_FP64 else tl.float32
    best_value = tl.full([], float("-inf"), score_dtype)
    best_token = block_start
    fallback_value = tl.full([], float("-inf"), score_dtype)
    fallback_token = block_start
    for chunk in range(BLOCK // SAMPLE_CHUNK):
        chunk_start = block_start + chunk * SAMPLE_CHUNK
        offsets = chunk_start + tl.arange(0, SAMPLE_CHUNK)
        mask = offsets < vocab_size
        logits = _load_logits(target_row_ptr, offsets, mask, temp, APPLY_TEMPERATURE)
        if HAS_DRAFT_LOGITS:
            # log(p - q) = log p + log(1 - q / p) where q < p.
            log_p = logits - target_lse
            ratio = tl.exp(
                _load_logits(draft_row_ptr, offsets, mask, temp, False) - draft_lse - log_p
            )
            has_mass = ratio < 1.0
            residual = tl.where(
                has_mass, log_p + tl.log(tl.where(has_mass, 1.0 - ratio, 1.0)), float("-inf")
            )
            # A draft id outside the vocabulary was not drawn from q: use p.
            residual = tl.where((draft >= 0) & (draft < vocab_size), residual, logits)
        else:
            # A point-mass draft leaves p without the rejected token.
            residual = tl.where(offsets == draft, float("-inf"), logits)
        noise = gumbel_block(key, chunk_start + _RESIDUAL_STREAM, SAMPLE_CHUNK, USE_FP64)
        value, idx = tl.max(residual.to(score_dtype) + noise, axis=0, return_indices=True)
        best_token = tl.where(value > best_value, chunk_start + idx, best_token)
        best_value = tl.maximum(best_value, value)
        value, idx = tl.max(logits.to(score_dtype) + noise, axis=0, return_indices=True)
        fallback_token = tl.where(value > fallback_value, chunk_start + idx, fallback_token)
        fallback_value = tl.maximum(fallback_value, value)
    return best_value, best_token, fallback_value, fallback_token


@triton.jit
def _bonus_block_winner(
    seed,
    pos,
    temp,
    target_row_ptr,  # [V]
    block_start,
    vocab_size,
    BLOCK: tl.constexpr,
    SAMPLE_CHUNK: tl.constexpr,
    USE_FP64: tl.constexpr,
    APPLY_TEMPERATURE: tl.constexpr,
):
    """Gumbel-max (argmax when greedy) winner of one block of the bonus row."""
    score_dtype = tl.float64 if USE_FP64 else tl.float32
    best_value = tl.full([], float("-inf"), score_dtype)
    best_token = block_start
    for chunk in range(BLOCK // SAMPLE_CHUNK):
        chunk_start = block_start + chunk * SAMPLE_CHUNK
        offsets = chunk_start + tl.arange(0, SAMPLE_CHUNK)
        scores = _load_logits(
            target_row_ptr, offsets, offsets < vocab_size, temp, APPLY_TEMPERATURE
        ).to(score_dtype)
        if temp != 0.0:
            # The sampler's own stream at this position.
            scores += gumbel_block(request_key(seed, pos), chunk_start, SAMPLE_CHUNK, USE_FP64)
        value, idx = tl.max(scores, axis=0, return_indices=True)
        best_token = tl.where(value > best_value, chunk_start + idx, best_token)
        best_value = tl.maximum(best_value, value)
    return best_value, best_token


@triton.jit(do_not_specialize=["step"])
def _rejection_step_kernel(
    # [num_reqs, num_blocks]: per-block winners of the emitted (corrected or bonus) row
    winner_value_ptr,
    winner_token_ptr,
    # [num_reqs, num_blocks]: per-block winners drawn from p itself, used when
    # a rejected row's residual has no mass
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
    CHUNK: tl.constexpr,
    SAMPLE_CHUNK: tl.constexpr,
    NUM_BLOCKS_PAD: tl.constexpr,
    SYNTHETIC_MODE: tl.constexpr,
    HAS_DRAFT_LOGITS: tl.constexpr,
    USE_FP64: tl.constexpr,
    APPLY_TEMPERATURE: tl.constexpr,
):
    # Requests on grid axis 0: axes 1 and 2 are limited to 65535 programs.
    req_idx = tl.program_id(0)
    block_idx = tl.program_id(1)
    block_start = block_idx * BLOCK
    start = tl.load(cu_num_logits_ptr + req_idx)
    num_drafts = tl.minimum(tl.load(cu_num_logits_ptr + req_idx + 1) - start - 1, num_spec_steps)
    state_idx = tl.load(idx_mapping_ptr + req_idx).to(tl.int64)
    temp = tl.load(temperature_ptr + state_idx).to(tl.float32)
    seed = tl.load(seeds_ptr + state_idx)
    reached_row_ptr = reached_ptr + req_idx * (num_spec_steps + 1)
    stats_offset = req_idx * num_spec_steps * num_blocks
    winner_offset = req_idx * num_blocks + block_idx

    # Every block of the request judges draft step - 1 itself, from the
    # partial sums of the previous launch: same inputs, same verdict, and no
    # block waits for another.
    reached = step == 0
    rejected = step < 0
    if step > 0:
        row = step - 1
        if (tl.load(reached_row_ptr + row) != 0) & (row < num_drafts):
            logit_idx = start + row
            row_stats = stats_offset + row * num_blocks
            target_row_ptr = target_logits_ptr + logit_idx.to(tl.int64) * target_logits_stride
            draft_row_ptr = (
                draft_logits_ptr + state_idx * draft_logits_stride_0 + row * draft_logits_stride_1
            )
            key = request_key(seed, tl.load(pos_ptr + logit_idx))
            # Draft `row` is the input token of logit `row + 1`.
            draft = tl.load(draft_tokens_ptr + logit_idx + 1).to(tl.int32)
            target_lse = _row_logsumexp(
                target_max_ptr + row_stats,
                target_sumexp_ptr + row_stats,
                num_blocks,
                NUM_BLOCKS_PAD,
            )
            if HAS_DRAFT_LOGITS:
                # Greedy rows have no draft partial sums (they never need q).
                draft_lse = tl.zeros([], tl.float32)
                if temp != 0.0:
                    draft_lse = _row_logsumexp(
                        draft_max_ptr + row_stats,
                        draft_sumexp_ptr + row_stats,
                        num_blocks,
                        NUM_BLOCKS_PAD,
                    )
            else:
                draft_lse = 0.0
            accepted = _draft_accepted(
                key,
                draft,
                row,
                temp,
                target_lse,
                draft_lse,
                row_stats,
                target_max_ptr,
                target_argmax_ptr,
                target_row_ptr,
                draft_row_ptr,
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
            if rejected:
                if temp == 0.0:
                    # The corrected token is the target argmax, kept by the block pass.
                    block_max = tl.load(target_max_ptr + row_stats + block_idx)
                    block_argmax = tl.load(target_argmax_ptr + row_stats + block_idx)
                    tl.store(winner_value_ptr + winner_offset, block_max)
                    tl.store(winner_token_ptr + winner_offset, block_argmax)
                    tl.store(fallback_value_ptr + winner_offset, block_max)
                    tl.store(fallback_token_ptr + winner_offset, block_argmax)
                else:
                    value, token, fallback_value, fallback_token = _corrected_block_winners(
                        key,
                        draft,
                        temp,
                        target_lse,
                        draft_lse,
                        target_row_ptr,
                        draft_row_ptr,
                        block_start,
                        vocab_size,
                        BLOCK,
                        SAMPLE_CHUNK,
                        HAS_DRAFT_LOGITS,
                        USE_FP64,
                        APPLY_TEMPERATURE,
                    )
                    tl.store(winner_value_ptr + winner_offset, value)
                    tl.store(winner_token_ptr + winner_offset, token)
                    tl.store(fallback_value_ptr + winner_offset, fallback_value)
                    tl.store(fallback_token_ptr + winner_offset, fallback_token)
    is_bonus = reached & (step == num_drafts)
    if block_idx == 0:
        tl.store(reached_row_ptr + step, reached.to(tl.int8))
        if rejected:
            tl.store(num_accepted_ptr + req_idx, step - 1)
        if is_bonus:
            tl.store(num_accepted_ptr + req_idx, step)

    logit_idx = start + step
    target_row_ptr = target_logits_ptr + logit_idx.to(tl.int64) * target_logits_stride
    if is_bonus:
        value, token = _bonus_block_winner(
            seed,
            tl.load(pos_ptr + logit_idx),
            temp,
            target_row_ptr,
            block_start,
            vocab_size,
            BLOCK,
            SAMPLE_CHUNK,
            USE_FP64,
            APPLY_TEMPERATURE,
        )
        tl.store(winner_value_ptr + winner_offset, value)
        tl.store(winner_token_ptr + winner_offset, token)
        tl.store(fallback_value_ptr + winner_offset, value)
        tl.store(fallback_token_ptr + winner_offset, token)
    elif reached:
        # Block pass over the row that verifies draft `step`.
        row_stats = stats_offset + step * num_blocks + block_idx
        block_max, block_argmax, block_sumexp = _block_stats(
            target_row_ptr, block_start, vocab_size, temp, BLOCK, CHUNK, APPLY_TEMPERATURE
        )
        tl.store(target_max_ptr + row_stats, block_max)
        tl.store(target_argmax_ptr + row_stats, block_argmax)
        tl.store(target_sumexp_ptr + row_stats, block_sumexp)
        if HAS_DRAFT_LOGITS:
            # Greedy rows compare with the argmax only and never need q.
            if temp != 0.0:
                block_max, _, block_sumexp = _block_stats(
                    draft_logits_ptr
                    + state_idx * draft_logits_stride_0
                    + step * draft_logits_stride_1,
                    block_start,
                    vocab_size,
                    temp,
                    BLOCK,
                    CHUNK,
                    False,
                )
                tl.store(draft_max_ptr + row_stats, block_max)
                tl.store(draft_sumexp_ptr + row_stats, block_sumexp)


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
    values = tl.load(
        winner_value_ptr + req_idx * num_blocks + blocks, mask=mask, other=float("-inf")
    )
    if tl.max(values, axis=0) > float("-inf"):
        token = tl.load(winner_token_ptr + req_idx * num_blocks + tl.argmax(values, axis=0))
    else:
        # Rounding can leave a rejected row's residual without mass (or, in
        # synthetic mode, p == q); p itself is the only sensible choice then.
        # A row without any finite logit lands here too and emits token 0.
        values = tl.load(
            fallback_value_ptr + req_idx * num_blocks + blocks, mask=mask, other=float("-inf")
        )
        token = tl.load(fallback_token_ptr + req_idx * num_blocks + tl.argmax(values, axis=0))

    cols = tl.arange(0, OUT_PAD)
    drafts = tl.load(draft_tokens_ptr + start + 1 + cols, mask=cols < num_accepted, other=0)
    out = tl.where(
        cols < num_accepted,
        drafts.to(tl.int64),
        tl.where(cols == num_accepted, token.to(tl.int64), -1),
    )
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
        raise ValueError(
            "target_logits must be a 2-D float tensor, got "
            f"{tuple(target_logits.shape)} {target_logits.dtype}"
        )
    num_logits, vocab_size = target_logits.shape
    if vocab_size > MAX_VOCAB_SIZE:
        raise ValueError(f"target_logits: vocabulary of {vocab_size} exceeds {MAX_VOCAB_SIZE}")
    if num_speculative_steps < 1:
        raise ValueError(f"num_speculative_steps must be >= 1, got {num_speculative_steps}")
    num_reqs = cu_num_logits.shape[0] - 1
    if idx_mapping.shape != (num_reqs,):
        raise ValueError(
            f"idx_mapping must have shape ({num_reqs},), got {tuple(idx_mapping.shape)}"
        )
    if draft_tokens.shape != (num_logits,) or pos.shape != (num_logits,):
        raise ValueError("draft_tokens and pos must have one entry per logit")
    if draft_logits is not None and (
        draft_logits.dim() != 3
        or draft_logits.shape[1] < num_speculative_steps
        or draft_logits.shape[2] != vocab_size
    ):
        raise ValueError(
            f"draft_logits must be [max_num_reqs, {num_speculative_steps}, {vocab_size}], "
            f"got {tuple(draft_logits.shape)}"
        )
    if synthetic_conditional_rates is not None and synthetic_conditional_rates.shape != (
        num_speculative_steps,
    ):
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

    block, chunk, sample_chunk = vocab_split(vocab_size)
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

    for step in range(num_speculative_steps + 1):
        _rejection_step_kernel[(num_reqs, num_blocks)](
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
            CHUNK=chunk,
            SAMPLE_CHUNK=sample_chunk,
            NUM_BLOCKS_PAD=num_blocks_pad,
            SYNTHETIC_MODE=synthetic_conditional_rates is not None,
            HAS_DRAFT_LOGITS=has_draft_logits,
            USE_FP64=use_fp64,
            APPLY_TEMPERATURE=apply_temperature,
            num_warps=4,
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
