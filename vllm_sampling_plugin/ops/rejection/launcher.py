"""The rejection-sampling kernel of speculative decoding and its packed launcher.

One step body, ``_rejection_step``, serves every mode: standard
(``strict`` / ``probabilistic`` in vLLM 0.20) and synthetic, with or without
draft logits, in FP32 or FP64. A request is walked in steps ``0 .. K`` over
its vocabulary blocks. Step ``step`` first judges draft ``step - 1`` from the
partial sums step ``step - 1`` left behind, and then does the one piece of
row work the request still needs:

* the block pass over target row ``step`` (max, argmax and summed exponentials
  per stats tile; the same for the draft row) while every draft so far is
  accepted;
* the residual resample of row ``step - 1`` when that draft was just rejected;
* the bonus sample of row ``step`` when it follows the last accepted draft.

A request therefore never reads a row beyond its first rejection: the memory
traffic follows the acceptance pattern, in standard and synthetic mode alike.

Two launch styles run that body (``_plan_launch`` picks one per call):

* small batches: one launch, ``_rejection_kernel``. The blocks of a request
  meet at a per-request barrier between steps and the last one to finish
  writes the tokens. One launch instead of ``K + 2`` is what a small batch
  needs: its kernels take microseconds, the host's launches tens.
* large batches: one launch of ``_rejection_step_kernel`` per step, then
  ``_emit_kernel``. With several waves of programs, blocks that wait at a
  barrier would hold their SM slots idle; separate launches keep every slot
  streaming.

Launch plans and exact results
------------------------------
How many tokens a program covers (and its loop chunks and warps) is chosen
per call so that the grid has about ``programs_per_sm`` programs per SM
(``TUNING``, ``_plan_launch``). No result depends on the plan:

* partial sums are kept per *stats tile*, a span of tokens that depends on
  the vocabulary size only; each tile sums ``exp(logit - tile max)`` as
  fixed-point integers, and the row's log-sum-exp adds the rescaled tile
  sums as integers too. Integer addition is exact, so the log-sum-exp has
  the same bits whatever the launch style, block, chunk or warp count (a float sum's
  rounding would follow the reduction order, which all of those change);
* maxima are exact and every argmax keeps the lowest token id among equal
  values, per lane, per program and across programs;
* the noise depends on (seed, position, token index) only.

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

import dataclasses
import functools

import torch
import triton
import triton.language as tl

from ..random import gumbel_block, request_key, uniform


@dataclasses.dataclass(frozen=True)
class RejectionTuning:
    """Launch parameters of the rejection kernels; see ``TUNING``."""

    # Most vocabulary tokens one program covers (power of two).
    max_block: int
    # Tokens per loop step of the block pass (power of two; raised to the
    # stats tile when smaller).
    chunk: int
    # Tokens per loop step of the resample and bonus passes (power of two, >= 16).
    sample_chunk: int
    num_warps: int
    # Blocks are made smaller (down to one stats tile) until the grid has
    # about this many programs per SM, so small batches still fill the GPU.
    programs_per_sm: int
    # Every step in one launch whose blocks meet at per-request barriers
    # (``_rejection_kernel``) while it has at most this many programs per SM,
    # else one launch per step and one to emit. The single launch saves the
    # host K + 1 launches but keeps each block resident through the waits,
    # which costs more than the launches once there are several waves of
    # programs. 0: never; on CPU, any other value means always.
    single_launch_programs_per_sm: int = 12


# Keyed by ``use_fp64``. To tune, run ``python3 -m
# vllm_sampling_plugin.bench.rejection --tune`` on the GPU and paste its
# "best" lines here; tokens are identical for every setting. Measured on an
# H100 at B=256, K=3 (CUDA-graph replay, docs/benchmarks.md): 8192-token
# blocks beat 4096 (each block also reads the row's tile statistics once a
# step), and larger sampling chunks lose to register pressure. The single
# launch wins while B * blocks <= 12 * SMs (B <= ~21 at V=151936).
TUNING: dict[bool, RejectionTuning] = {
    False: RejectionTuning(
        max_block=8192, chunk=2048, sample_chunk=512, num_warps=4, programs_per_sm=16
    ),
    True: RejectionTuning(
        max_block=8192, chunk=1024, sample_chunk=512, num_warps=4, programs_per_sm=4
    ),
}

# The stats tile: a quarter of a small vocabulary (so CPU tests see several
# tiles and programs per row), at most _MAX_STATS_TILE tokens. Every block
# reads all of a row's tile statistics once a step, so few large tiles pay.
_MIN_STATS_TILE = 16
_MAX_STATS_TILE = 2048
_TOKENS_PER_WARP = 128
# Philox counters under the key of a logit; the plain Gumbel stream uses
# [0, V) (FP64) or [0, V / 4) (FP32), the residual one [2**30, 2**30 + V) or
# [2**28, 2**28 + V / 4), so the three never meet while V < 2**30 - 1.
_RESIDUAL_STREAM = tl.constexpr(1 << 30)
_ACCEPT_COUNTER = tl.constexpr((1 << 31) - 1)
MAX_VOCAB_SIZE = (1 << 30) - 1
_FLOAT32_MAX = tl.constexpr(3.4028234663852886e38)
_INT32_MAX = tl.constexpr(2**31 - 1)


def stats_tile(vocab_size: int) -> int:
    """Tokens per stats tile: a function of the vocabulary only."""
    quarter = triton.next_power_of_2(triton.cdiv(vocab_size, 4))
    return min(_MAX_STATS_TILE, max(_MIN_STATS_TILE, quarter))


def fixed_point_bits(vocab_size: int) -> int:
    """Fraction bits of the summed exponentials: V terms of at most 1 fit in 62 bits."""
    return 62 - (vocab_size - 1).bit_length()


@dataclasses.dataclass(frozen=True)
class _LaunchPlan:
    block: int
    num_blocks: int
    chunk: int
    sample_chunk: int
    num_warps: int
    single_launch: bool


@functools.cache
def _num_sms(device: torch.device) -> int | None:
    if device.type != "cuda":
        return None
    return torch.cuda.get_device_properties(device).multi_processor_count


def _plan_launch(
    num_reqs: int, vocab_size: int, tuning: RejectionTuning, num_sms: int | None
) -> _LaunchPlan:
    """Block, chunks, warps and launch style for ``num_reqs`` requests; ``num_sms=None``: CPU."""
    tile = stats_tile(vocab_size)
    whole_row = tile * triton.next_power_of_2(triton.cdiv(vocab_size, tile))
    if num_sms is None:
        # The interpreter runs programs one after another, each costing tens
        # of milliseconds, so a block could never wait for a later one: the
        # single launch gets one block per request. Step by step, one stats
        # tile per program (four for a small vocabulary, so tests cross
        # program boundaries).
        single_launch = tuning.single_launch_programs_per_sm > 0
        block = whole_row if single_launch else tile
        return _LaunchPlan(
            block=block,
            num_blocks=triton.cdiv(vocab_size, block),
            chunk=tile,
            sample_chunk=min(tile, tuning.sample_chunk),
            num_warps=1,
            single_launch=single_launch,
        )
    tokens_per_program = num_reqs * vocab_size // (tuning.programs_per_sm * num_sms)
    block = tile
    while block * 2 <= min(tokens_per_program, tuning.max_block, whole_row):
        block *= 2
    # The blocks of one request wait for each other in the single launch:
    # they must fit on the GPU together, one per SM at the least (see
    # _rejection_kernel).
    single_block = block
    while triton.cdiv(vocab_size, single_block) > num_sms:
        single_block *= 2
    single_launch = (
        num_reqs * triton.cdiv(vocab_size, single_block)
        <= tuning.single_launch_programs_per_sm * num_sms
    )
    if single_launch:
        block = single_block
    chunk = min(block, max(tile, tuning.chunk))
    sample_chunk = min(block, tuning.sample_chunk)
    return _LaunchPlan(
        block=block,
        num_blocks=triton.cdiv(vocab_size, block),
        chunk=chunk,
        sample_chunk=sample_chunk,
        num_warps=max(1, min(tuning.num_warps, min(chunk, sample_chunk) // _TOKENS_PER_WARP)),
        single_launch=single_launch,
    )


@dataclasses.dataclass
class _Workspace:
    """Scratch for up to ``capacity`` requests of one launch shape.

    Entries are laid out at multiples of a request's share, so a workspace
    serves every call of at most ``capacity`` requests as it is: a call
    allocates only its outputs. The counters start at zero and every single
    launch leaves them at zero.
    """

    capacity: int
    launch_counters: torch.Tensor  # [2] int32
    arrivals: torch.Tensor  # [capacity] int32
    reached: torch.Tensor  # [capacity, num_spec_steps + 1] int8 (step by step)
    num_accepted: torch.Tensor  # [capacity] int32 (step by step)
    winner_value: torch.Tensor  # [capacity, num_blocks] fp32 (fp64 if use_fp64)
    winner_token: torch.Tensor  # [capacity, num_blocks] int32
    fallback_value: torch.Tensor  # [capacity, num_blocks] fp32 (fp64 if use_fp64)
    fallback_token: torch.Tensor  # [capacity, num_blocks] int32
    target_max: torch.Tensor  # [capacity, num_spec_steps, num_tiles] fp32
    target_argmax: torch.Tensor  # [capacity, num_spec_steps, num_tiles] int32
    target_sumexp: torch.Tensor  # [capacity, num_spec_steps, num_tiles] int64
    draft_max: torch.Tensor  # as target_max, or target_max itself without draft logits
    draft_sumexp: torch.Tensor  # as target_sumexp, or target_sumexp itself

    @classmethod
    def allocate(cls, capacity, device, num_blocks, num_spec_steps, num_tiles, use_fp64, has_draft):
        def empty(*shape, dtype=torch.int32):
            return torch.empty((capacity, *shape), dtype=dtype, device=device)

        score_dtype = torch.float64 if use_fp64 else torch.float32
        stats = (num_spec_steps, num_tiles)
        target_max = empty(*stats, dtype=torch.float32)
        target_sumexp = empty(*stats, dtype=torch.int64)
        return cls(
            capacity=capacity,
            launch_counters=torch.zeros(2, dtype=torch.int32, device=device),
            arrivals=torch.zeros(capacity, dtype=torch.int32, device=device),
            reached=empty(num_spec_steps + 1, dtype=torch.int8),
            num_accepted=empty(),
            winner_value=empty(num_blocks, dtype=score_dtype),
            winner_token=empty(num_blocks),
            fallback_value=empty(num_blocks, dtype=score_dtype),
            fallback_token=empty(num_blocks),
            target_max=target_max,
            target_argmax=empty(*stats),
            target_sumexp=target_sumexp,
            draft_max=empty(*stats, dtype=torch.float32) if has_draft else target_max,
            draft_sumexp=empty(*stats, dtype=torch.int64) if has_draft else target_sumexp,
        )


# Workspaces by launch shape, newest last. They grow by doubling and are
# never freed: a CUDA graph may hold the address of an older one. Calls that
# share a device must run in stream order (as the V2 runner's rejection
# sampler does): concurrent calls on two streams would share one workspace.
_WORKSPACES: dict[tuple, list[_Workspace]] = {}


def _workspace(device, num_reqs, *shape) -> _Workspace:
    kept = _WORKSPACES.setdefault((device, *shape), [])
    if not kept or kept[-1].capacity < num_reqs:
        capacity = max(num_reqs, 2 * kept[-1].capacity if kept else 16)
        kept.append(_Workspace.allocate(capacity, device, *shape))
    return kept[-1]


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
    max_ptr,  # [num_tiles] of this row
    argmax_ptr,  # [num_tiles] of this row
    sumexp_ptr,  # [num_tiles] of this row
    block_start,
    block_end,
    vocab_size,
    num_tiles,
    temp,
    fixed_one,
    CHUNK: tl.constexpr,
    STATS_TILE: tl.constexpr,
    STORE_ARGMAX: tl.constexpr,
    STORE_SUMEXP: tl.constexpr,
    APPLY_TEMPERATURE: tl.constexpr,
):
    """Max, first argmax and fixed-point sum of exp(logit - max) per stats tile."""
    tiles = tl.arange(0, CHUNK // STATS_TILE)
    lanes = tl.arange(0, STATS_TILE)
    for chunk in range(tl.cdiv(block_end - block_start, CHUNK)):
        chunk_start = block_start + chunk * CHUNK
        offsets = chunk_start + tiles[:, None] * STATS_TILE + lanes[None, :]
        logits = _load_logits(row_ptr, offsets, offsets < vocab_size, temp, APPLY_TEMPERATURE)
        tile_max, tile_argmax = tl.max(logits, axis=1, return_indices=True)
        tile_idx = chunk_start // STATS_TILE + tiles
        in_row = tile_idx < num_tiles
        tl.store(max_ptr + tile_idx, tile_max, mask=in_row)
        if STORE_ARGMAX:
            tl.store(argmax_ptr + tile_idx, tile_idx * STATS_TILE + tile_argmax, mask=in_row)
        if STORE_SUMEXP:
            # Terms in (0, 1] as integers with fixed_one = 2**bits: their sum
            # is exact, hence the same in any order (see the module doc).
            # While nothing is finite the sum stays 0 (and avoids -inf - -inf).
            terms = tl.where(
                tile_max[:, None] > float("-inf"), tl.exp(logits - tile_max[:, None]), 0.0
            )
            fixed = (terms * fixed_one).to(tl.int64)
            tl.store(sumexp_ptr + tile_idx, tl.sum(fixed, axis=1), mask=in_row)


@triton.jit
def _row_logsumexp(
    max_ptr,  # [num_tiles] of one row
    sumexp_ptr,  # [num_tiles] of one row, fixed point
    num_tiles,
    fixed_unit,
    NUM_TILES_PAD: tl.constexpr,
):
    tiles = tl.arange(0, NUM_TILES_PAD)
    mask = tiles < num_tiles
    maxes = tl.load(max_ptr + tiles, mask=mask, other=float("-inf"))
    sumexps = tl.load(sumexp_ptr + tiles, mask=mask, other=0)
    row_max = tl.max(maxes, axis=0)
    # Tiles without a finite logit contribute nothing (and no NaN from -inf - -inf).
    scales = tl.exp(tl.where(maxes > float("-inf"), maxes - row_max, float("-inf")))
    # Rescaled per tile, then added as integers: the same bits in any order.
    total = tl.sum((sumexps.to(tl.float64) * scales.to(tl.float64)).to(tl.int64), axis=0)
    return row_max + tl.log(total.to(tl.float32) * fixed_unit)


@triton.jit
def _row_argmax(
    max_ptr,  # [num_tiles] of one row
    argmax_ptr,  # [num_tiles] of one row
    num_tiles,
    NUM_TILES_PAD: tl.constexpr,
):
    tiles = tl.arange(0, NUM_TILES_PAD)
    maxes = tl.load(max_ptr + tiles, mask=tiles < num_tiles, other=float("-inf"))
    # Ties go to the lowest tile, and within a tile to the lowest token: torch.argmax.
    row_max, tile = tl.max(maxes, axis=0, return_indices=True)
    return row_max, tl.load(argmax_ptr + tile)


@triton.jit
def _lowest_best(values, tokens):
    """Max of per-lane bests, and the lowest token holding it."""
    best = tl.max(values, axis=0)
    return best, tl.min(tl.where(values == best, tokens, _INT32_MAX), axis=0)


@triton.jit
def _draft_accepted(
    key,
    draft,
    row,
    temp,
    greedy_token,
    target_lse,
    draft_lse,
    target_row_ptr,  # [V]
    draft_row_ptr,  # [V]
    conditional_rates_ptr,
    vocab_size,
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
        # same acceptance; only this O(num_tiles) test differs.
        accepted = uniform(key, accept_counter, USE_FP64) < tl.load(conditional_rates_ptr + row)
    elif temp == 0.0:
        accepted = greedy_token == draft
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
    block_end,
    vocab_size,
    SAMPLE_CHUNK: tl.constexpr,
    HAS_DRAFT_LOGITS: tl.constexpr,
    USE_FP64: tl.constexpr,
    APPLY_TEMPERATURE: tl.constexpr,
):
    """Gumbel-max winners of one block for a rejected draft (temperature > 0).

    Returns (value, token) of the residual max(0, p - q) and of p itself; the
    latter is used only should the residual have no mass anywhere. Each lane
    keeps its best across chunks (strictly greater: the earliest token keeps
    a tie), and the lanes are reduced once at the end.
    """
    score_dtype = tl.float64 if USE_FP64 else tl.float32
    lanes = tl.arange(0, SAMPLE_CHUNK)
    best_value = tl.full([SAMPLE_CHUNK], float("-inf"), score_dtype)
    best_token = block_start + lanes
    fallback_value = tl.full([SAMPLE_CHUNK], float("-inf"), score_dtype)
    fallback_token = block_start + lanes
    draft_in_vocab = (draft >= 0) & (draft < vocab_size)
    for chunk in range(tl.cdiv(block_end - block_start, SAMPLE_CHUNK)):
        chunk_start = block_start + chunk * SAMPLE_CHUNK
        offsets = chunk_start + lanes
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
            residual = tl.where(draft_in_vocab, residual, logits)
        else:
            # A point-mass draft leaves p without the rejected token.
            residual = tl.where(offsets == draft, float("-inf"), logits)
        noise = gumbel_block(key, chunk_start + _RESIDUAL_STREAM, SAMPLE_CHUNK, USE_FP64)
        value = residual.to(score_dtype) + noise
        wins = value > best_value
        best_value = tl.where(wins, value, best_value)
        best_token = tl.where(wins, offsets, best_token)
        value = logits.to(score_dtype) + noise
        wins = value > fallback_value
        fallback_value = tl.where(wins, value, fallback_value)
        fallback_token = tl.where(wins, offsets, fallback_token)
    value, token = _lowest_best(best_value, best_token)
    fallback, fallback_tok = _lowest_best(fallback_value, fallback_token)
    return value, token, fallback, fallback_tok


@triton.jit
def _bonus_block_winner(
    seed,
    pos,
    temp,
    target_row_ptr,  # [V]
    block_start,
    block_end,
    vocab_size,
    SAMPLE_CHUNK: tl.constexpr,
    USE_FP64: tl.constexpr,
    APPLY_TEMPERATURE: tl.constexpr,
):
    """Gumbel-max (argmax when greedy) winner of one block of the bonus row."""
    score_dtype = tl.float64 if USE_FP64 else tl.float32
    lanes = tl.arange(0, SAMPLE_CHUNK)
    best_value = tl.full([SAMPLE_CHUNK], float("-inf"), score_dtype)
    best_token = block_start + lanes
    key = request_key(seed, pos)
    for chunk in range(tl.cdiv(block_end - block_start, SAMPLE_CHUNK)):
        chunk_start = block_start + chunk * SAMPLE_CHUNK
        offsets = chunk_start + lanes
        scores = _load_logits(
            target_row_ptr, offsets, offsets < vocab_size, temp, APPLY_TEMPERATURE
        ).to(score_dtype)
        if temp != 0.0:
            # The sampler's own stream at this position.
            scores += gumbel_block(key, chunk_start, SAMPLE_CHUNK, USE_FP64)
        wins = scores > best_value
        best_value = tl.where(wins, scores, best_value)
        best_token = tl.where(wins, offsets, best_token)
    return _lowest_best(best_value, best_token)


@triton.jit
def _rejection_step(
    step,
    req_idx,
    block_idx,
    num_blocks,
    block_start,
    block_end,
    start,
    num_drafts,
    state_idx,
    temp,
    seed,
    # [num_reqs, num_blocks]: per-block winners of the emitted (corrected or bonus) row
    winner_value_ptr,
    winner_token_ptr,
    # [num_reqs, num_blocks]: per-block winners drawn from p itself, used when
    # a rejected row's residual has no mass
    fallback_value_ptr,
    fallback_token_ptr,
    # [num_reqs, num_spec_steps, num_tiles]; the sums are fixed point (int64)
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
    # [num_logits]
    pos_ptr,
    # [num_spec_steps]
    conditional_rates_ptr,
    vocab_size,
    num_spec_steps,
    num_tiles,
    fixed_one,
    fixed_unit,
    CHUNK: tl.constexpr,
    SAMPLE_CHUNK: tl.constexpr,
    STATS_TILE: tl.constexpr,
    NUM_TILES_PAD: tl.constexpr,
    SYNTHETIC_MODE: tl.constexpr,
    HAS_DRAFT_LOGITS: tl.constexpr,
    USE_FP64: tl.constexpr,
    APPLY_TEMPERATURE: tl.constexpr,
):
    """Step ``step`` of one block of a request whose row ``step - 1`` was reached.

    Judges draft ``step - 1`` (from every block's partial sums of that row),
    then does this block's share of the row work the request needs next (see
    the module doc). Returns whether row ``step`` is reached, i.e. whether
    draft ``step - 1`` was accepted (always at step 0).
    """
    winner_offset = req_idx * num_blocks + block_idx
    stats_offset = req_idx * num_spec_steps * num_tiles
    reached = step == 0
    if step > 0:
        # Every block judges the draft itself, from the partial sums of the
        # previous step: same inputs, same verdict, and no block waits for
        # another's verdict.
        row = step - 1
        logit_idx = start + row
        row_stats = stats_offset + row * num_tiles
        target_row_ptr = target_logits_ptr + logit_idx.to(tl.int64) * target_logits_stride
        draft_row_ptr = (
            draft_logits_ptr + state_idx * draft_logits_stride_0 + row * draft_logits_stride_1
        )
        key = request_key(seed, tl.load(pos_ptr + logit_idx))
        # Draft `row` is the input token of logit `row + 1`.
        draft = tl.load(draft_tokens_ptr + logit_idx + 1).to(tl.int32)
        greedy_max, greedy_token = _row_argmax(
            target_max_ptr + row_stats, target_argmax_ptr + row_stats, num_tiles, NUM_TILES_PAD
        )
        # Greedy rows have no partial sums (they never need p or q).
        target_lse = tl.zeros([], tl.float32)
        draft_lse = tl.zeros([], tl.float32)
        if temp != 0.0:
            target_lse = _row_logsumexp(
                target_max_ptr + row_stats,
                target_sumexp_ptr + row_stats,
                num_tiles,
                fixed_unit,
                NUM_TILES_PAD,
            )
            if HAS_DRAFT_LOGITS:
                draft_lse = _row_logsumexp(
                    draft_max_ptr + row_stats,
                    draft_sumexp_ptr + row_stats,
                    num_tiles,
                    fixed_unit,
                    NUM_TILES_PAD,
                )
        reached = _draft_accepted(
            key,
            draft,
            row,
            temp,
            greedy_token,
            target_lse,
            draft_lse,
            target_row_ptr,
            draft_row_ptr,
            conditional_rates_ptr,
            vocab_size,
            SYNTHETIC_MODE,
            HAS_DRAFT_LOGITS,
            USE_FP64,
            APPLY_TEMPERATURE,
        )
        if reached == 0:
            if temp == 0.0:
                # The corrected token is the target argmax: every block
                # offers it, the emit step takes block 0's.
                tl.store(winner_value_ptr + winner_offset, greedy_max)
                tl.store(winner_token_ptr + winner_offset, greedy_token)
                tl.store(fallback_value_ptr + winner_offset, greedy_max)
                tl.store(fallback_token_ptr + winner_offset, greedy_token)
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
                    block_end,
                    vocab_size,
                    SAMPLE_CHUNK,
                    HAS_DRAFT_LOGITS,
                    USE_FP64,
                    APPLY_TEMPERATURE,
                )
                tl.store(winner_value_ptr + winner_offset, value)
                tl.store(winner_token_ptr + winner_offset, token)
                tl.store(fallback_value_ptr + winner_offset, fallback_value)
                tl.store(fallback_token_ptr + winner_offset, fallback_token)

    logit_idx = start + step
    target_row_ptr = target_logits_ptr + logit_idx.to(tl.int64) * target_logits_stride
    if reached & (step == num_drafts):
        value, token = _bonus_block_winner(
            seed,
            tl.load(pos_ptr + logit_idx),
            temp,
            target_row_ptr,
            block_start,
            block_end,
            vocab_size,
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
        row_stats = stats_offset + step * num_tiles
        if temp == 0.0:
            # Greedy rows compare with the argmax only: no sums, no q.
            _block_stats(
                target_row_ptr,
                target_max_ptr + row_stats,
                target_argmax_ptr + row_stats,
                target_sumexp_ptr + row_stats,
                block_start,
                block_end,
                vocab_size,
                num_tiles,
                temp,
                fixed_one,
                CHUNK,
                STATS_TILE,
                True,
                False,
                APPLY_TEMPERATURE,
            )
        else:
            _block_stats(
                target_row_ptr,
                target_max_ptr + row_stats,
                target_argmax_ptr + row_stats,
                target_sumexp_ptr + row_stats,
                block_start,
                block_end,
                vocab_size,
                num_tiles,
                temp,
                fixed_one,
                CHUNK,
                STATS_TILE,
                True,
                True,
                APPLY_TEMPERATURE,
            )
            if HAS_DRAFT_LOGITS:
                _block_stats(
                    draft_logits_ptr
                    + state_idx * draft_logits_stride_0
                    + step * draft_logits_stride_1,
                    draft_max_ptr + row_stats,
                    draft_max_ptr + row_stats,
                    draft_sumexp_ptr + row_stats,
                    block_start,
                    block_end,
                    vocab_size,
                    num_tiles,
                    temp,
                    fixed_one,
                    CHUNK,
                    STATS_TILE,
                    False,
                    True,
                    False,
                )
    return reached


@triton.jit
def _emit_row(
    req_idx,
    num_accepted,
    start,
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
    # [num_logits]
    draft_tokens_ptr,
    num_spec_steps,
    num_blocks,
    NUM_BLOCKS_PAD: tl.constexpr,
    OUT_PAD: tl.constexpr,
):
    """Writes a request's accepted drafts, its corrected or bonus token and the padding."""
    blocks = tl.arange(0, NUM_BLOCKS_PAD)
    mask = blocks < num_blocks
    values = tl.load(
        winner_value_ptr + req_idx * num_blocks + blocks, mask=mask, other=float("-inf")
    )
    # tl.argmax keeps the lowest block among equal values: the lowest token.
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
    # [num_reqs, num_blocks]
    winner_value_ptr,
    winner_token_ptr,
    fallback_value_ptr,
    fallback_token_ptr,
    # [num_reqs, num_spec_steps, num_tiles]
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
    # [num_logits]
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
    vocab_size,
    num_spec_steps,
    num_tiles,
    num_blocks,
    block_size,
    fixed_one,
    fixed_unit,
    CHUNK: tl.constexpr,
    SAMPLE_CHUNK: tl.constexpr,
    STATS_TILE: tl.constexpr,
    NUM_TILES_PAD: tl.constexpr,
    NUM_BLOCKS_PAD: tl.constexpr,
    OUT_PAD: tl.constexpr,
    SYNTHETIC_MODE: tl.constexpr,
    HAS_DRAFT_LOGITS: tl.constexpr,
    USE_FP64: tl.constexpr,
    APPLY_TEMPERATURE: tl.constexpr,
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

    running = tl.full([], 1, tl.int32)
    for step in range(num_drafts + 1):
        if running != 0:
            reached = _rejection_step(
                step,
                req_idx,
                block_idx,
                num_blocks,
                block_start,
                block_end,
                start,
                num_drafts,
                state_idx,
                temp,
                seed,
                winner_value_ptr,
                winner_token_ptr,
                fallback_value_ptr,
                fallback_token_ptr,
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
                num_spec_steps,
                num_tiles,
                fixed_one,
                fixed_unit,
                CHUNK,
                SAMPLE_CHUNK,
                STATS_TILE,
                NUM_TILES_PAD,
                SYNTHETIC_MODE,
                HAS_DRAFT_LOGITS,
                USE_FP64,
                APPLY_TEMPERATURE,
            )
            all_arrived = num_blocks * (step + 1)
            arrived = _arrive(arrivals_ptr + req_idx) + 1
            if (reached == 0) | (step == num_drafts):
                running = running * 0
                if arrived == all_arrived:
                    # The request's last block: every winner is in. Nobody
                    # reads the counter again, so it is reset for the next call.
                    tl.store(arrivals_ptr + req_idx, 0)
                    _emit_row(
                        req_idx,
                        tl.where(reached, step, step - 1),
                        start,
                        sampled_ptr,
                        sampled_stride,
                        num_sampled_ptr,
                        winner_value_ptr,
                        winner_token_ptr,
                        fallback_value_ptr,
                        fallback_token_ptr,
                        draft_tokens_ptr,
                        num_spec_steps,
                        num_blocks,
                        NUM_BLOCKS_PAD,
                        OUT_PAD,
                    )
            else:
                # The next step judges the draft from every block's sums.
                # Plain reads while waiting (a read-modify-write per poll
                # would queue behind the other blocks' at the L2), one
                # acquiring atomic once all have arrived.
                while arrived < all_arrived:
                    arrived = tl.load(arrivals_ptr + req_idx, volatile=True)
                tl.atomic_add(arrivals_ptr + req_idx, 0, sem="acquire")
                tl.debug_barrier()
    # The last program out leaves the launch counters at zero for the next call.
    if tl.atomic_add(launch_counters_ptr + 1, 1, sem="acq_rel") == tl.num_programs(0) - 1:
        tl.store(launch_counters_ptr, 0)
        tl.store(launch_counters_ptr + 1, 0)


@triton.jit(do_not_specialize=["step"])
def _rejection_step_kernel(
    # [num_reqs, num_spec_steps + 1]: row `step` reached (drafts 0..step-1 accepted)
    reached_ptr,
    # [num_reqs]
    num_accepted_ptr,
    # [num_reqs, num_blocks]
    winner_value_ptr,
    winner_token_ptr,
    fallback_value_ptr,
    fallback_token_ptr,
    # [num_reqs, num_spec_steps, num_tiles]
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
    # [num_logits]
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
    num_tiles,
    block_size,
    fixed_one,
    fixed_unit,
    CHUNK: tl.constexpr,
    SAMPLE_CHUNK: tl.constexpr,
    STATS_TILE: tl.constexpr,
    NUM_TILES_PAD: tl.constexpr,
    SYNTHETIC_MODE: tl.constexpr,
    HAS_DRAFT_LOGITS: tl.constexpr,
    USE_FP64: tl.constexpr,
    APPLY_TEMPERATURE: tl.constexpr,
):
    """One step of every request per launch, for launch plans whose blocks
    cannot wait for each other (see ``_plan_launch``); ``_emit_kernel`` follows."""
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
        reached = _rejection_step(
            step,
            req_idx,
            block_idx,
            tl.num_programs(1),
            block_start,
            tl.minimum(block_start + block_size, vocab_size),
            start,
            num_drafts,
            state_idx,
            tl.load(temperature_ptr + state_idx).to(tl.float32),
            tl.load(seeds_ptr + state_idx),
            winner_value_ptr,
            winner_token_ptr,
            fallback_value_ptr,
            fallback_token_ptr,
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
            num_spec_steps,
            num_tiles,
            fixed_one,
            fixed_unit,
            CHUNK,
            SAMPLE_CHUNK,
            STATS_TILE,
            NUM_TILES_PAD,
            SYNTHETIC_MODE,
            HAS_DRAFT_LOGITS,
            USE_FP64,
            APPLY_TEMPERATURE,
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
    _emit_row(
        req_idx,
        tl.load(num_accepted_ptr + req_idx),
        tl.load(cu_num_logits_ptr + req_idx),
        sampled_ptr,
        sampled_stride,
        num_sampled_ptr,
        winner_value_ptr,
        winner_token_ptr,
        fallback_value_ptr,
        fallback_token_ptr,
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
    tuning: RejectionTuning | None = None,
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
        tuning: launch parameters; None takes ``TUNING[use_fp64]``. Speed
            only: the output is the same for every tuning.

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
    if tuning is not None and not isinstance(tuning, RejectionTuning):
        raise ValueError(f"tuning must be a RejectionTuning or None, got {type(tuning).__name__}")

    device = target_logits.device
    sampled = torch.empty(num_reqs, num_speculative_steps + 1, dtype=torch.int64, device=device)
    num_sampled = torch.empty(num_reqs, dtype=torch.int32, device=device)
    if num_reqs == 0:
        return sampled, num_sampled
    if target_logits.stride(1) != 1:
        target_logits = target_logits.contiguous()
    if draft_logits is not None and draft_logits.stride(2) != 1:
        draft_logits = draft_logits.contiguous()

    plan = _plan_launch(num_reqs, vocab_size, tuning or TUNING[use_fp64], _num_sms(device))
    tile = stats_tile(vocab_size)
    num_tiles = triton.cdiv(vocab_size, tile)
    fixed_bits = fixed_point_bits(vocab_size)
    has_draft_logits = draft_logits is not None
    work = _workspace(
        device,
        num_reqs,
        plan.num_blocks,
        num_speculative_steps,
        num_tiles,
        use_fp64,
        has_draft_logits,
    )
    inputs = (
        work.winner_value,
        work.winner_token,
        work.fallback_value,
        work.fallback_token,
        work.target_max,
        work.target_argmax,
        work.target_sumexp,
        work.draft_max,
        work.draft_sumexp,
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
    )
    constants = {
        "CHUNK": plan.chunk,
        "SAMPLE_CHUNK": plan.sample_chunk,
        "STATS_TILE": tile,
        "NUM_TILES_PAD": triton.next_power_of_2(num_tiles),
        "SYNTHETIC_MODE": synthetic_conditional_rates is not None,
        "HAS_DRAFT_LOGITS": has_draft_logits,
        "USE_FP64": use_fp64,
        "APPLY_TEMPERATURE": apply_temperature,
        "num_warps": plan.num_warps,
    }
    emit_constants = {
        "NUM_BLOCKS_PAD": triton.next_power_of_2(plan.num_blocks),
        "OUT_PAD": triton.next_power_of_2(num_speculative_steps + 1),
    }
    if plan.single_launch:
        _rejection_kernel[(num_reqs * plan.num_blocks,)](
            sampled,
            sampled.stride(0),
            num_sampled,
            work.launch_counters,
            work.arrivals,
            *inputs,
            vocab_size,
            num_speculative_steps,
            num_tiles,
            plan.num_blocks,
            plan.block,
            float(2**fixed_bits),
            float(2**-fixed_bits),
            **constants,
            **emit_constants,
        )
        return sampled, num_sampled

    for step in range(num_speculative_steps + 1):
        _rejection_step_kernel[(num_reqs, plan.num_blocks)](
            work.reached,
            work.num_accepted,
            *inputs,
            step,
            vocab_size,
            num_speculative_steps,
            num_tiles,
            plan.block,
            float(2**fixed_bits),
            float(2**-fixed_bits),
            **constants,
        )
    _emit_kernel[(num_reqs,)](
        sampled,
        sampled.stride(0),
        num_sampled,
        work.winner_value,
        work.winner_token,
        work.fallback_value,
        work.fallback_token,
        work.num_accepted,
        draft_tokens,
        cu_num_logits,
        num_speculative_steps,
        plan.num_blocks,
        **emit_constants,
        num_warps=1,
    )
    return sampled, num_sampled
