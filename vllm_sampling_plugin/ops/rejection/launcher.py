"""The two launch styles of the rejection step body, their emit kernel, and
``rejection_sample_packed``, the launcher on vLLM's packed layout.

Small batches run every step in one launch (``_rejection_kernel``: the blocks of
a request meet at per-request barriers); large ones run ``_rejection_step_kernel``
once per step and then ``_emit_kernel``. ``plan.plan_launch`` picks the style.
"""


import torch
import triton
import triton.language as tl

from ..device import num_sms
from ..host_math import cdiv, next_power_of_2
from ..random import noise_code
from .draws import MAX_VOCAB_SIZE
from .emit import emit_row
from .filters import filter_thresholds
from .plan import (
    TUNING,
    LaunchPlan,
    RejectionTuning,
    fixed_point_bits,
    plan_launch,
    stats_tile,
)
from .step import rejection_step
from .workspace import workspace_for


def device_plan(
    num_reqs: int, vocab_size: int, tuning: RejectionTuning, device: torch.device
) -> LaunchPlan:
    """The launch plan ``rejection_sample_packed`` takes for ``num_reqs``
    requests on ``device`` (the start-up warm-up plans with it too)."""
    return plan_launch(num_reqs, vocab_size, tuning, num_sms(device))


@triton.jit
def _arrive(counter_ptr):
    """Counts this block in; returns the count before it.

    The CTA barrier puts every thread's stores before the releasing atomic,
    and the acquiring side of the atomic makes the other blocks' stores
    visible to the loads after it.
    """
    tl.debug_barrier()
    return tl.atomic_add(counter_ptr, 1, sem="acq_rel")


@triton.jit
def _rejection_kernel(
    # [num_reqs, num_spec_steps + 1]
    sampled_ptr,
    sampled_stride,
    # [num_reqs]
    num_sampled_ptr,
    # [2]: tickets handed out, programs finished; zero between calls
    launch_counters_ptr,
    # [num_reqs]: blocks of each request that finished a step; zero between calls
    arrivals_ptr,
    # The step body's arguments, as ``rejection_step`` documents them:
    winners,  # 4 x [num_reqs, num_blocks]
    tile_stats,  # 5 x [num_reqs, num_spec_steps, num_tiles]
    target_logits,  # ([num_logits, V], row stride)
    draft_logits,  # ([max_num_reqs, num_spec_steps, V], two strides)
    requests,  # per-logit and per-slot request state, filter thresholds
    sizes,  # (vocab_size, num_spec_steps, num_tiles, fixed_one, fixed_unit)
    num_blocks,
    block_size,
    CHUNK: tl.constexpr,
    SAMPLE_CHUNK: tl.constexpr,
    STATS_TILE: tl.constexpr,
    NUM_TILES_PAD: tl.constexpr,
    NUM_BLOCKS_PAD: tl.constexpr,
    OUT_PAD: tl.constexpr,
    SYNTHETIC_MODE: tl.constexpr,
    HAS_DRAFT_LOGITS: tl.constexpr,
    NOISE: tl.constexpr,
    APPLY_TEMPERATURE: tl.constexpr,
    FILTERED: tl.constexpr,
    SCALE_DRAFT: tl.constexpr,
):
    """Every step of every request in one launch: the blocks of a request
    meet at a per-request barrier between steps, and the last block to
    finish emits the request's tokens.

    Waiting is safe because blocks take their (request, block) from a ticket
    counter in the order they start: every block of an earlier request has
    started (and so is resident) before any block of a later one, all
    requests but the newest have every block running and finish without
    help, and the launcher keeps ``num_blocks`` at most the SM count, so the
    newest request's blocks always fit once the others are done.
    """
    draft_tokens_ptr, cu_num_logits_ptr, idx_mapping_ptr, _, temperature_ptr, seeds_ptr, _, _ = (
        requests
    )
    vocab_size, num_spec_steps, _, _, _ = sizes
    ticket = tl.atomic_add(launch_counters_ptr, 1, sem="relaxed")
    req_idx = ticket // num_blocks
    block_idx = ticket % num_blocks
    block_start = block_idx * block_size
    block_end = tl.minimum(block_start + block_size, vocab_size)
    start = tl.load(cu_num_logits_ptr + req_idx)
    num_drafts = tl.minimum(tl.load(cu_num_logits_ptr + req_idx + 1) - start - 1, num_spec_steps)
    state_idx = tl.load(idx_mapping_ptr + req_idx).to(tl.int64)
    temp = tl.load(temperature_ptr + state_idx).to(tl.float32)
    seed = tl.load(seeds_ptr + state_idx)

    request = (req_idx, start, num_drafts, state_idx, temp, seed)
    block = (block_idx, num_blocks, block_start, block_end)

    running = tl.full([], 1, tl.int32)
    for step in range(num_drafts + 1):
        if running != 0:
            reached = rejection_step(
                step, request, block, winners, tile_stats, target_logits, draft_logits,
                requests, sizes, CHUNK, SAMPLE_CHUNK, STATS_TILE, NUM_TILES_PAD,
                SYNTHETIC_MODE, HAS_DRAFT_LOGITS, NOISE, APPLY_TEMPERATURE, FILTERED, SCALE_DRAFT,
            )
            all_arrived = num_blocks * (step + 1)
            arrived = _arrive(arrivals_ptr + req_idx) + 1
            if (reached == 0) | (step == num_drafts):
                running = running * 0
                if arrived == all_arrived:
                    # The request's last block: every winner is in. Nobody
                    # reads the counter again, so it is reset for the next call.
                    tl.store(arrivals_ptr + req_idx, 0)
                    emit_row(
                        req_idx, tl.where(reached, step, step - 1), start, sampled_ptr,
                        sampled_stride, num_sampled_ptr, winners, draft_tokens_ptr,
                        num_spec_steps, num_blocks, NUM_BLOCKS_PAD, OUT_PAD,
                    )
            else:
                # The next step judges the draft from every block's sums.
                _wait_for_all(arrivals_ptr + req_idx, arrived, all_arrived)
    _leave_launch(launch_counters_ptr)


@triton.jit
def _wait_for_all(counter_ptr, arrived, all_arrived):
    """Waits until the counter reaches ``all_arrived``, then sees every
    block's stores. Plain reads while waiting (a read-modify-write per poll
    would queue behind the other blocks' at the L2), one acquiring atomic
    once all have arrived."""
    while arrived < all_arrived:
        arrived = tl.load(counter_ptr, volatile=True)
    tl.atomic_add(counter_ptr, 0, sem="acquire")
    tl.debug_barrier()


@triton.jit
def _leave_launch(launch_counters_ptr):
    """The last program out leaves the launch counters at zero for the next call."""
    if tl.atomic_add(launch_counters_ptr + 1, 1, sem="acq_rel") == tl.num_programs(0) - 1:
        tl.store(launch_counters_ptr, 0)
        tl.store(launch_counters_ptr + 1, 0)


@triton.jit(do_not_specialize=["step"])
def _rejection_step_kernel(
    # [num_reqs, num_spec_steps + 1]: row `step` reached (drafts 0..step-1 accepted)
    reached_ptr,
    # [num_reqs]
    num_accepted_ptr,
    # The step body's arguments, as ``rejection_step`` documents them:
    winners,  # 4 x [num_reqs, num_blocks]
    tile_stats,  # 5 x [num_reqs, num_spec_steps, num_tiles]
    target_logits,  # ([num_logits, V], row stride)
    draft_logits,  # ([max_num_reqs, num_spec_steps, V], two strides)
    requests,  # per-logit and per-slot request state, filter thresholds
    sizes,  # (vocab_size, num_spec_steps, num_tiles, fixed_one, fixed_unit)
    step,
    block_size,
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
    """One step of every request per launch, for launch plans whose blocks
    cannot wait for each other (see ``plan_launch``); ``_emit_kernel`` follows."""
    _, cu_num_logits_ptr, idx_mapping_ptr, _, temperature_ptr, seeds_ptr, _, _ = requests
    vocab_size, num_spec_steps, _, _, _ = sizes
    # Requests on grid axis 0: axes 1 and 2 are limited to 65535 programs.
    req_idx = tl.program_id(0)
    block_idx = tl.program_id(1)
    block_start = block_idx * block_size
    start = tl.load(cu_num_logits_ptr + req_idx)
    num_drafts = tl.minimum(tl.load(cu_num_logits_ptr + req_idx + 1) - start - 1, num_spec_steps)
    reached_row_ptr = reached_ptr + req_idx * (num_spec_steps + 1)
    # A request takes part in launch `step` while draft step - 1 exists and
    # every draft before it was accepted.
    active = step == 0
    if step > 0:
        active = (tl.load(reached_row_ptr + step - 1) != 0) & (step - 1 < num_drafts)
    reached = step < 0
    if active:
        state_idx = tl.load(idx_mapping_ptr + req_idx).to(tl.int64)
        request = (
            req_idx,
            start,
            num_drafts,
            state_idx,
            tl.load(temperature_ptr + state_idx).to(tl.float32),
            tl.load(seeds_ptr + state_idx),
        )
        block = (
            block_idx,
            tl.num_programs(1),
            block_start,
            tl.minimum(block_start + block_size, vocab_size),
        )
        reached = rejection_step(
            step, request, block, winners, tile_stats, target_logits, draft_logits,
            requests, sizes, CHUNK, SAMPLE_CHUNK, STATS_TILE, NUM_TILES_PAD,
            SYNTHETIC_MODE, HAS_DRAFT_LOGITS, NOISE, APPLY_TEMPERATURE, FILTERED, SCALE_DRAFT,
        )
    if block_idx == 0:
        tl.store(reached_row_ptr + step, reached.to(tl.int8))
        if active & (reached == 0):
            tl.store(num_accepted_ptr + req_idx, step - 1)
        if reached & (step == num_drafts):
            tl.store(num_accepted_ptr + req_idx, step)


@triton.jit
def _emit_kernel(
    # [num_reqs, num_spec_steps + 1]
    sampled_ptr,
    sampled_stride,
    # [num_reqs]
    num_sampled_ptr,
    winners,  # 4 x [num_reqs, num_blocks], as emit_row documents them
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
    emit_row(
        req_idx,
        tl.load(num_accepted_ptr + req_idx),
        tl.load(cu_num_logits_ptr + req_idx),
        sampled_ptr,
        sampled_stride,
        num_sampled_ptr,
        winners,
        draft_tokens_ptr,
        num_spec_steps,
        num_blocks,
        NUM_BLOCKS_PAD,
        OUT_PAD,
    )


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
    scale_draft_logits: bool = False,
    tuning: RejectionTuning | None = None,
    # [max_num_reqs] each
    top_k: torch.Tensor | None = None,
    top_p: torch.Tensor | None = None,
    min_p: torch.Tensor | None = None,
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
            probability p(draft)), else float ``[max_num_reqs, K, V]``, the
            drafter's logits indexed by state slot and step, normalised by
            the kernel: the draft law ``q`` is their softmax, after the
            temperature where ``scale_draft_logits``.
        synthetic_conditional_rates: None for standard mode; float32 ``[K]``
            *conditional* rates (see ``unconditional_to_conditional_rates``)
            for synthetic mode.
        use_fp64: FP64 acceptance uniforms and resampling noise.
        apply_temperature: see ``target_logits``.
        scale_draft_logits: the draft logits are stored before the
            temperature (vLLM 0.32/0.33's drafters cache them so, and their
            verification divides them): the kernel divides every draft row of
            a request with temperature > 0 by it. False: read as they are
            (already scaled, or drafted at temperature 1).
        tuning: launch parameters; None takes ``TUNING[use_fp64]``. Speed
            only: the output is the same for every tuning.
        top_k: None, or int32/int64 ``[max_num_reqs]`` by state slot; ``<= 0``
            or ``>= V`` is off for the request.
        top_p: None, or float32 ``[max_num_reqs]``; ``>= 1`` is off.
        min_p: None, or float32 ``[max_num_reqs]``; ``0`` is off. With any of
            the three, every target row of a request with temperature > 0 is
            filtered as vLLM 0.33's sampler filters it (after the
            temperature: min_p, then top-k, then top-p; ``filters.py``)
            before it is verified against: one per-row threshold pass, then
            the kernels mask the tokens below it as they read the logits.
            Greedy rows are not filtered (their argmax is the same).

    Returns:
        ``(sampled, num_sampled)``: int64 ``[num_reqs, K + 1]`` holding the
        accepted drafts, then the corrected or bonus token, then ``-1``; and a
        fresh int32 ``[num_reqs]`` with the number of tokens per row (vLLM
        edits it in place).
    """
    _check_packed_inputs(
        target_logits, draft_tokens, cu_num_logits, idx_mapping, pos, temperature,
        num_speculative_steps, draft_logits, synthetic_conditional_rates, tuning,
        top_k, top_p, min_p,
    )
    num_reqs = cu_num_logits.shape[0] - 1
    device = target_logits.device
    sampled = torch.empty(num_reqs, num_speculative_steps + 1, dtype=torch.int64, device=device)
    num_sampled = torch.empty(num_reqs, dtype=torch.int32, device=device)
    if num_reqs == 0:
        return sampled, num_sampled
    if target_logits.stride(1) != 1:
        target_logits = target_logits.contiguous()
    if draft_logits is not None and draft_logits.stride(2) != 1:
        draft_logits = draft_logits.contiguous()

    filtered = top_k is not None or top_p is not None or min_p is not None
    thresholds = temperature  # never read unless filtered
    if filtered:
        thresholds = filter_thresholds(
            target_logits, cu_num_logits, idx_mapping, temperature, top_k, top_p, min_p,
            num_speculative_steps, apply_temperature=apply_temperature,
        )
    vocab_size = target_logits.shape[1]
    plan = device_plan(num_reqs, vocab_size, tuning or TUNING[use_fp64], device)
    tile = stats_tile(vocab_size)
    num_tiles = cdiv(vocab_size, tile)
    work = workspace_for(
        device, num_reqs, plan.num_blocks, num_speculative_steps, num_tiles, use_fp64,
        draft_logits is not None,
    )
    step_inputs = _step_inputs(
        work,
        target_logits,
        draft_logits,
        (draft_tokens, cu_num_logits, idx_mapping, pos, temperature, seeds),
        synthetic_conditional_rates,
        thresholds,
        num_speculative_steps,
        num_tiles,
    )
    constants, emit_constants = _kernel_constants(
        plan,
        tile,
        num_tiles,
        num_speculative_steps,
        SYNTHETIC_MODE=synthetic_conditional_rates is not None,
        HAS_DRAFT_LOGITS=draft_logits is not None,
        NOISE=noise_code(use_fp64),
        APPLY_TEMPERATURE=apply_temperature,
        FILTERED=filtered,
        SCALE_DRAFT=scale_draft_logits,
    )
    if plan.single_launch:
        _rejection_kernel[(num_reqs * plan.num_blocks,)](
            sampled, sampled.stride(0), num_sampled, work.launch_counters, work.arrivals,
            *step_inputs, plan.num_blocks, plan.block, **constants, **emit_constants,
        )
    else:
        _launch_step_by_step(
            sampled, num_sampled, work, step_inputs, plan, constants, emit_constants,
            draft_tokens, cu_num_logits, num_speculative_steps,
        )
    return sampled, num_sampled


def _check_packed_inputs(
    target_logits,
    draft_tokens,
    cu_num_logits,
    idx_mapping,
    pos,
    temperature,
    num_speculative_steps,
    draft_logits,
    synthetic_conditional_rates,
    tuning,
    top_k,
    top_p,
    min_p,
) -> None:
    """The shape and dtype checks of ``rejection_sample_packed`` (no values read)."""
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
    if tuning is not None and not isinstance(tuning, RejectionTuning):
        raise ValueError(f"tuning must be a RejectionTuning or None, got {type(tuning).__name__}")
    for name, tensor, dtypes in (
        ("top_k", top_k, (torch.int32, torch.int64)),
        ("top_p", top_p, (torch.float32,)),
        ("min_p", min_p, (torch.float32,)),
    ):
        if tensor is not None and (
            tensor.shape != temperature.shape or tensor.dtype not in dtypes
        ):
            raise ValueError(
                f"{name} must be {' or '.join(map(str, dtypes))} of shape "
                f"{tuple(temperature.shape)} like temperature, got {tuple(tensor.shape)} "
                f"{tensor.dtype}"
            )


def _step_inputs(
    work,
    target_logits,
    draft_logits,
    per_logit_and_slot,
    synthetic_conditional_rates,
    thresholds,
    num_speculative_steps,
    num_tiles,
):
    """The step body's bundles (``winners`` to ``sizes``, as ``rejection_step``
    documents them); an absent input stands in for by a tensor never read."""
    temperature = per_logit_and_slot[4]
    vocab_size = target_logits.shape[1]
    fixed_bits = fixed_point_bits(vocab_size)
    return (
        work.winners,
        work.tile_stats,
        (target_logits, target_logits.stride(0)),
        (
            (draft_logits, draft_logits.stride(0), draft_logits.stride(1))
            if draft_logits is not None
            else (target_logits, 0, 0)
        ),
        (
            *per_logit_and_slot,
            synthetic_conditional_rates if synthetic_conditional_rates is not None else temperature,
            thresholds,
        ),
        (
            vocab_size,
            num_speculative_steps,
            num_tiles,
            float(2**fixed_bits),
            float(2**-fixed_bits),
        ),
    )


def _kernel_constants(plan, tile, num_tiles, num_speculative_steps, **switches):
    """The constexpr arguments of the step body (and ``num_warps``), then the
    emit step's: the loop chunks and stats tiling of the plan, and the mode
    switches as given."""
    constants = {
        "CHUNK": plan.chunk,
        "SAMPLE_CHUNK": plan.sample_chunk,
        "STATS_TILE": tile,
        "NUM_TILES_PAD": next_power_of_2(num_tiles),
        **switches,
        "num_warps": plan.num_warps,
    }
    emit_constants = {
        "NUM_BLOCKS_PAD": next_power_of_2(plan.num_blocks),
        "OUT_PAD": next_power_of_2(num_speculative_steps + 1),
    }
    return constants, emit_constants


def _launch_step_by_step(
    sampled,
    num_sampled,
    work,
    step_inputs,
    plan,
    constants,
    emit_constants,
    draft_tokens,
    cu_num_logits,
    num_speculative_steps,
) -> None:
    """One launch of ``_rejection_step_kernel`` per step, then ``_emit_kernel``."""
    num_reqs = num_sampled.shape[0]
    for step in range(num_speculative_steps + 1):
        _rejection_step_kernel[(num_reqs, plan.num_blocks)](
            work.reached,
            work.num_accepted,
            *step_inputs,
            step,
            plan.block,
            **constants,
        )
    _emit_kernel[(num_reqs,)](
        sampled,
        sampled.stride(0),
        num_sampled,
        work.winners,
        work.num_accepted,
        draft_tokens,
        cu_num_logits,
        num_speculative_steps,
        plan.num_blocks,
        **emit_constants,
        num_warps=1,
    )
