"""Launch parameters of the Gumbel-max kernel (``TUNING``) and the plan of one call:
tile, tiles per chunk and warps from the batch, the vocabulary and the SM count."""

import dataclasses

import torch

from ..device import num_sms
from ..host_math import cdiv, next_power_of_2


@dataclasses.dataclass(frozen=True)
class GumbelTuning:
    """Launch parameters of stage 1; see ``TUNING``."""

    # Tokens per loop step of one program (power of two, >= 16).
    tile: int
    # Upper bound on the tiles one program walks (its chunk).
    max_tiles_per_chunk: int
    num_warps: int
    num_stages: int
    # Chunks are made smaller until the grid has about this many programs
    # per SM, so small batches still fill the GPU.
    programs_per_sm: int


# Keyed by ``use_fp64``. Replace an entry to tune (benchmarks/sampler.py --tune
# sweeps these); tokens are identical for every setting.
TUNING: dict[bool, GumbelTuning] = {
    False: GumbelTuning(
        tile=2048, max_tiles_per_chunk=4, num_warps=8, num_stages=2, programs_per_sm=4
    ),
    # Best of the --tune sweep (the GPU and the run: docs/benchmarks.md).
    True: GumbelTuning(
        tile=512, max_tiles_per_chunk=8, num_warps=8, num_stages=2, programs_per_sm=2
    ),
}

_MIN_TILE = 16
_TOKENS_PER_WARP = 128


@dataclasses.dataclass(frozen=True)
class LaunchPlan:
    tile: int
    tiles_per_chunk: int
    num_chunks: int
    num_warps: int
    num_stages: int


def plan_launch(
    num_tokens: int, vocab_size: int, use_fp64: bool, device: torch.device
) -> LaunchPlan:
    tuning = TUNING[use_fp64]
    tile = min(tuning.tile, max(next_power_of_2(vocab_size), _MIN_TILE))
    num_tiles = cdiv(vocab_size, tile)
    # The interpreter (no SM count) runs programs one after another: fewer is faster.
    target_programs = tuning.programs_per_sm * (num_sms(device) or 1)
    tiles_per_chunk = (num_tokens * num_tiles) // target_programs
    tiles_per_chunk = max(1, min(tiles_per_chunk, tuning.max_tiles_per_chunk, num_tiles))
    return LaunchPlan(
        tile=tile,
        tiles_per_chunk=tiles_per_chunk,
        num_chunks=cdiv(num_tiles, tiles_per_chunk),
        num_warps=max(1, min(tuning.num_warps, tile // _TOKENS_PER_WARP)),
        num_stages=tuning.num_stages,
    )
