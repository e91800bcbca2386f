"""The one step body every launch style runs: judge the previous draft, then this block's
share of the next row's work (block statistics, residual resample or bonus draw)."""

import triton
import triton.language as tl

from ..random import request_key
from .draws import bonus_block_winner, corrected_block_winners, draft_accepted
from .stats import block_stats, row_argmax, row_logsumexp


@triton.jit
def rejection_step(
    step,
    # (req_idx, start: its first logit, num_drafts, state_idx, temperature, seed)
    request,
    # (block_idx, num_blocks, block_start, block_end): this block's tokens of a row
    block,
    # [num_reqs, num_blocks] each: (winner_value, winner_token) of the emitted
    # (corrected or bonus) row, then (fallback_value, fallback_token) drawn from
    # p itself, used when a rejected row's residual has no mass
    winners,
    # [num_reqs, num_spec_steps, num_tiles] each: (target_max, target_argmax,
    # target_sumexp, draft_max, draft_sumexp); the sums are fixed point (int64)
    tile_stats,
    # (logits [num_logits, V], row stride)
    target_logits,
    # (logits [max_num_reqs, num_spec_steps, V], its two outer strides)
    draft_logits,
    # (draft_tokens [num_logits]: logit j + 1 of a request holds its draft j,
    #  cu_num_logits [num_reqs + 1], idx_mapping [num_reqs], pos [num_logits],
    #  temperature [max_num_reqs], seeds [max_num_reqs],
    #  conditional_rates [num_spec_steps],
    #  thresholds [num_logits]: each target row's filter threshold, FILTERED only)
    requests,
    # (vocab_size, num_spec_steps, num_tiles, fixed_one, fixed_unit)
    sizes,
    CHUNK: tl.constexpr,
    SAMPLE_CHUNK: tl.constexpr,
    STATS_TILE: tl.constexpr,
    NUM_TILES_PAD: tl.constexpr,
    SYNTHETIC_MODE: tl.constexpr,
    HAS_DRAFT_LOGITS: tl.constexpr,
    NOISE: tl.constexpr,
    APPLY_TEMPERATURE: tl.constexpr,
    FILTERED: tl.constexpr,
    SCALE_DRAFT: tl.constexpr,
):
    """Step ``step`` of one block of a request whose row ``step - 1`` was reached.

    Judges draft ``step - 1`` (from every block's partial sums of that row),
    then does this block's share of the row work the request needs next (see
    the module doc). Returns whether row ``step`` is reached, i.e. whether
    draft ``step - 1`` was accepted (always at step 0).
    """
    _, start, num_drafts, _, temp, seed = request
    _, _, block_start, block_end = block
    target_logits_ptr, target_logits_stride = target_logits
    _, _, _, pos_ptr, _, _, _, thresholds_ptr = requests
    reached = step == 0
    if step > 0:
        reached = _judge_draft(
            step - 1, request, block, winners, tile_stats, target_logits, draft_logits,
            requests, sizes, SAMPLE_CHUNK, NUM_TILES_PAD, SYNTHETIC_MODE, HAS_DRAFT_LOGITS,
            NOISE, APPLY_TEMPERATURE, FILTERED, SCALE_DRAFT,
        )

    logit_idx = start + step
    target_row_ptr = target_logits_ptr + logit_idx.to(tl.int64) * target_logits_stride
    threshold = _row_threshold(thresholds_ptr, logit_idx, FILTERED)
    if reached & (step == num_drafts):
        value, token = bonus_block_winner(
            seed, tl.load(pos_ptr + logit_idx), temp, target_row_ptr, threshold, block_start,
            block_end, sizes[0], SAMPLE_CHUNK, NOISE, APPLY_TEMPERATURE, FILTERED,
        )
        _store_winners(winners, _winner_offset(request, block), value, token, value, token)
    elif reached:
        _block_pass(
            step, request, block, target_row_ptr, threshold, tile_stats, draft_logits, sizes,
            CHUNK, STATS_TILE, HAS_DRAFT_LOGITS, APPLY_TEMPERATURE, FILTERED, SCALE_DRAFT,
        )
    return reached


@triton.jit
def _winner_offset(request, block):
    """This block's entry in the ``winners`` arrays."""
    return request[0] * block[1] + block[0]


@triton.jit
def _row_stats_offset(request, row, sizes):
    """Where row ``row`` of the request starts in the ``tile_stats`` arrays."""
    _, num_spec_steps, num_tiles, _, _ = sizes
    return request[0] * num_spec_steps * num_tiles + row * num_tiles


@triton.jit
def _row_threshold(thresholds_ptr, logit_idx, FILTERED: tl.constexpr):
    """The filter threshold of a target row as an order key; 0 keeps every token."""
    threshold = tl.full((), 0, tl.uint32)
    if FILTERED:
        threshold = tl.load(thresholds_ptr + logit_idx).to(tl.uint32, bitcast=True)
    return threshold


@triton.jit
def _store_winners(winners, offset, value, token, fallback_value, fallback_token):
    """This block's candidate for the emitted token, and its fallback drawn from p."""
    winner_value_ptr, winner_token_ptr, fallback_value_ptr, fallback_token_ptr = winners
    tl.store(winner_value_ptr + offset, value)
    tl.store(winner_token_ptr + offset, token)
    tl.store(fallback_value_ptr + offset, fallback_value)
    tl.store(fallback_token_ptr + offset, fallback_token)


@triton.jit
def _row_logsumexps(
    tile_stats,
    row_stats,
    temp,
    num_tiles,
    fixed_unit,
    NUM_TILES_PAD: tl.constexpr,
    HAS_DRAFT_LOGITS: tl.constexpr,
):
    """The target row's and the draft row's log-sum-exp from every block's
    tile sums; 0 for greedy rows, which have no sums (they never need p or q)."""
    target_max_ptr, _, target_sumexp_ptr, draft_max_ptr, draft_sumexp_ptr = tile_stats
    target_lse = tl.zeros([], tl.float32)
    draft_lse = tl.zeros([], tl.float32)
    if temp != 0.0:
        target_lse = row_logsumexp(
            target_max_ptr + row_stats, target_sumexp_ptr + row_stats, num_tiles, fixed_unit,
            NUM_TILES_PAD,
        )
        if HAS_DRAFT_LOGITS:
            draft_lse = row_logsumexp(
                draft_max_ptr + row_stats, draft_sumexp_ptr + row_stats, num_tiles, fixed_unit,
                NUM_TILES_PAD,
            )
    return target_lse, draft_lse


@triton.jit
def _judge_draft(
    row,
    request,
    block,
    winners,
    tile_stats,
    target_logits,
    draft_logits,
    requests,
    sizes,
    SAMPLE_CHUNK: tl.constexpr,
    NUM_TILES_PAD: tl.constexpr,
    SYNTHETIC_MODE: tl.constexpr,
    HAS_DRAFT_LOGITS: tl.constexpr,
    NOISE: tl.constexpr,
    APPLY_TEMPERATURE: tl.constexpr,
    FILTERED: tl.constexpr,
    SCALE_DRAFT: tl.constexpr,
):
    """Judges draft ``row`` and, when it is rejected, stores this block's
    candidates for the corrected token. Returns whether it was accepted.

    Every block judges the draft itself, from the partial sums of the
    previous step: same inputs, same verdict, and no block waits for
    another's verdict.
    """
    _, start, _, state_idx, temp, seed = request
    _, _, block_start, block_end = block
    target_max_ptr, target_argmax_ptr = tile_stats[0], tile_stats[1]
    target_logits_ptr, target_logits_stride = target_logits
    draft_logits_ptr, draft_stride_0, draft_stride_1 = draft_logits
    draft_tokens_ptr, _, _, pos_ptr, _, _, conditional_rates_ptr, thresholds_ptr = requests
    vocab_size, _, num_tiles, _, fixed_unit = sizes
    logit_idx = start + row
    row_stats = _row_stats_offset(request, row, sizes)
    target_row_ptr = target_logits_ptr + logit_idx.to(tl.int64) * target_logits_stride
    draft_row_ptr = draft_logits_ptr + state_idx * draft_stride_0 + row * draft_stride_1
    key = request_key(seed, tl.load(pos_ptr + logit_idx), NOISE)
    # Draft `row` is the input token of logit `row + 1`.
    draft = tl.load(draft_tokens_ptr + logit_idx + 1).to(tl.int32)
    threshold = _row_threshold(thresholds_ptr, logit_idx, FILTERED)
    greedy_max, greedy_token = row_argmax(
        target_max_ptr + row_stats, target_argmax_ptr + row_stats, num_tiles, NUM_TILES_PAD
    )
    target_lse, draft_lse = _row_logsumexps(
        tile_stats, row_stats, temp, num_tiles, fixed_unit, NUM_TILES_PAD, HAS_DRAFT_LOGITS
    )
    accepted = draft_accepted(
        key, draft, row, temp, greedy_token, target_lse, draft_lse, target_row_ptr, threshold,
        draft_row_ptr, conditional_rates_ptr, vocab_size, SYNTHETIC_MODE, HAS_DRAFT_LOGITS,
        NOISE, APPLY_TEMPERATURE, FILTERED, SCALE_DRAFT,
    )
    if accepted == 0:
        winner_offset = _winner_offset(request, block)
        if temp == 0.0:
            # The corrected token is the target argmax: every block
            # offers it, the emit step takes block 0's.
            _store_winners(
                winners, winner_offset, greedy_max, greedy_token, greedy_max, greedy_token
            )
        else:
            value, token, fallback_value, fallback_token = corrected_block_winners(
                key, draft, temp, target_lse, draft_lse, target_row_ptr, threshold,
                draft_row_ptr, block_start, block_end, vocab_size, SAMPLE_CHUNK,
                HAS_DRAFT_LOGITS, NOISE, APPLY_TEMPERATURE, FILTERED, SCALE_DRAFT,
            )
            _store_winners(winners, winner_offset, value, token, fallback_value, fallback_token)
    return accepted


@triton.jit
def _block_pass(
    step,
    request,
    block,
    target_row_ptr,
    threshold,
    tile_stats,
    draft_logits,
    sizes,
    CHUNK: tl.constexpr,
    STATS_TILE: tl.constexpr,
    HAS_DRAFT_LOGITS: tl.constexpr,
    APPLY_TEMPERATURE: tl.constexpr,
    FILTERED: tl.constexpr,
    SCALE_DRAFT: tl.constexpr,
):
    """This block's tile statistics of the rows that verify draft ``step``:
    the target row's, and the draft row's when there is one."""
    _, _, _, state_idx, temp, _ = request
    _, _, block_start, block_end = block
    target_max_ptr, target_argmax_ptr, target_sumexp_ptr, draft_max_ptr, draft_sumexp_ptr = tile_stats
    draft_logits_ptr, draft_stride_0, draft_stride_1 = draft_logits
    vocab_size, _, num_tiles, fixed_one, _ = sizes
    row_stats = _row_stats_offset(request, step, sizes)
    if temp == 0.0:
        # Greedy rows compare with the argmax only: no sums, no q.
        block_stats(
            target_row_ptr, target_max_ptr + row_stats, target_argmax_ptr + row_stats,
            target_sumexp_ptr + row_stats, block_start, block_end, vocab_size, num_tiles, temp,
            threshold, fixed_one, CHUNK, STATS_TILE,
            True, False, APPLY_TEMPERATURE, FILTERED,
        )
    else:
        block_stats(
            target_row_ptr, target_max_ptr + row_stats, target_argmax_ptr + row_stats,
            target_sumexp_ptr + row_stats, block_start, block_end, vocab_size, num_tiles, temp,
            threshold, fixed_one, CHUNK, STATS_TILE,
            True, True, APPLY_TEMPERATURE, FILTERED,
        )
        if HAS_DRAFT_LOGITS:
            # The draft row keeps no argmax: its max pointer stands in.
            block_stats(
                draft_logits_ptr + state_idx * draft_stride_0 + step * draft_stride_1,
                draft_max_ptr + row_stats, draft_max_ptr + row_stats,
                draft_sumexp_ptr + row_stats, block_start, block_end, vocab_size, num_tiles,
                temp, 0, fixed_one, CHUNK, STATS_TILE, False, True, SCALE_DRAFT, False,
            )
