"""Launch parameters of the rejection kernels and the plan of one call.

``TUNING`` holds the measured parameters per precision; ``plan_launch`` turns
them, the batch and the SM count into a block size, loop chunks, warps and a
launch style. No token depends on the plan (see the package doc): the stats
tile and the fixed-point bits depend on the vocabulary size only.
"""

import dataclasses

from ..host_math import cdiv, next_power_of_2


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
# benchmarks.rejection --tune`` from a checkout on the GPU and paste its
# "best" lines here; tokens are identical for every setting. Measured at
# B=256, K=3 (CUDA-graph replay; the GPU: docs/benchmarks.md): 8192-token
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


def stats_tile(vocab_size: int) -> int:
    """Tokens per stats tile: a function of the vocabulary only."""
    quarter = next_power_of_2(cdiv(vocab_size, 4))
    return min(_MAX_STATS_TILE, max(_MIN_STATS_TILE, quarter))


def fixed_point_bits(vocab_size: int) -> int:
    """Fraction bits of the summed exponentials: V terms of at most 1 fit in 62 bits."""
    return 62 - (vocab_size - 1).bit_length()


@dataclasses.dataclass(frozen=True)
class LaunchPlan:
    block: int
    num_blocks: int
    chunk: int
    sample_chunk: int
    num_warps: int
    single_launch: bool


def plan_launch(
    num_reqs: int, vocab_size: int, tuning: RejectionTuning, num_sms: int | None
) -> LaunchPlan:
    """Block, chunks, warps and launch style for ``num_reqs`` requests; ``num_sms=None``: CPU."""
    tile = stats_tile(vocab_size)
    whole_row = tile * next_power_of_2(cdiv(vocab_size, tile))
    if num_sms is None:
        # The interpreter runs programs one after another, each costing tens
        # of milliseconds, so a block could never wait for a later one: the
        # single launch gets one block per request. Step by step, one stats
        # tile per program (four for a small vocabulary, so tests cross
        # program boundaries).
        single_launch = tuning.single_launch_programs_per_sm > 0
        block = whole_row if single_launch else tile
        return LaunchPlan(
            block=block,
            num_blocks=cdiv(vocab_size, block),
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
    while cdiv(vocab_size, single_block) > num_sms:
        single_block *= 2
    single_launch = (
        num_reqs * cdiv(vocab_size, single_block)
        <= tuning.single_launch_programs_per_sm * num_sms
    )
    if single_launch:
        block = single_block
    chunk = min(block, max(tile, tuning.chunk))
    sample_chunk = min(block, tuning.sample_chunk)
    return LaunchPlan(
        block=block,
        num_blocks=cdiv(vocab_size, block),
        chunk=chunk,
        sample_chunk=sample_chunk,
        num_warps=max(1, min(tuning.num_warps, min(chunk, sample_chunk) // _TOKENS_PER_WARP)),
        single_launch=single_launch,
    )
