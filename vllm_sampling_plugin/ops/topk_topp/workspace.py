"""Scratch memory of the fused top-k/top-p kernels, kept per launch shape and reused."""

import dataclasses

import torch

from .select import RADIX_BINS


@dataclasses.dataclass
class Workspace:
    """The kernels' scratch for up to ``capacity`` rows of one launch shape.

    Rows are laid out at multiples of their own size, so a workspace serves
    every call of at most ``capacity`` rows as it is: a call allocates only
    its output. ``arrivals`` starts at zero and the last chunk of each row
    sets its counter back to zero.
    """

    capacity: int
    arrivals: torch.Tensor  # [capacity] int32
    chunk_best: torch.Tensor  # [capacity, num_chunks] fp32 (fp64 if use_fp64)
    chunk_best_id: torch.Tensor  # [capacity, num_chunks] int32
    chunk_mass: torch.Tensor  # [capacity, num_chunks] fp32
    chunk_floor: torch.Tensor  # [capacity, num_chunks] int32
    listed_logits: torch.Tensor  # [capacity, num_chunks, list_len] fp32
    listed_ids: torch.Tensor  # [capacity, num_chunks, list_len] int32
    # The short list and, for the rare wide rows, the collected tokens.
    scratch_logits: torch.Tensor  # [capacity, wide_list] fp32
    scratch_ids: torch.Tensor  # [capacity, wide_list] int32
    mass_hist: torch.Tensor  # [capacity, RADIX_BINS] int64, the exact path's

    @property
    def chunk_stats(self) -> tuple[torch.Tensor, ...]:
        """The kernels' ``chunk_stats`` argument."""
        return (self.chunk_best, self.chunk_best_id, self.chunk_mass, self.chunk_floor)

    @property
    def chunk_lists(self) -> tuple[torch.Tensor, ...]:
        """The kernels' ``chunk_lists`` argument."""
        return (self.listed_logits, self.listed_ids)

    @property
    def scratch(self) -> tuple[torch.Tensor, ...]:
        """The kernels' ``scratch`` argument."""
        return (self.scratch_logits, self.scratch_ids, self.mass_hist)

    @classmethod
    def allocate(cls, capacity, device, num_chunks, list_len, wide_list, use_fp64):
        def empty(*shape, dtype=torch.int32):
            return torch.empty((capacity, *shape), dtype=dtype, device=device)

        return cls(
            capacity=capacity,
            arrivals=torch.zeros(capacity, dtype=torch.int32, device=device),
            chunk_best=empty(num_chunks, dtype=torch.float64 if use_fp64 else torch.float32),
            chunk_best_id=empty(num_chunks),
            chunk_mass=empty(num_chunks, dtype=torch.float32),
            chunk_floor=empty(num_chunks),
            listed_logits=empty(num_chunks, list_len, dtype=torch.float32),
            listed_ids=empty(num_chunks, list_len),
            scratch_logits=empty(wide_list, dtype=torch.float32),
            scratch_ids=empty(wide_list),
            mass_hist=empty(RADIX_BINS, dtype=torch.int64),
        )


# Workspaces by (device, num_chunks, list_len, wide_list, use_fp64), newest
# last. They grow by doubling and are never freed: a CUDA graph may hold the
# address of an older one. Calls that share a device must run in stream
# order (as the V2 runner's sampler does): concurrent calls on two streams
# would share one workspace.
_WORKSPACES: dict[tuple, list[Workspace]] = {}


def workspace_for(device, num_tokens, num_chunks, list_len, wide_list, use_fp64) -> Workspace:
    kept = _WORKSPACES.setdefault((device, num_chunks, list_len, wide_list, use_fp64), [])
    if not kept or kept[-1].capacity < num_tokens:
        capacity = max(num_tokens, 2 * kept[-1].capacity if kept else 64)
        kept.append(
            Workspace.allocate(capacity, device, num_chunks, list_len, wide_list, use_fp64)
        )
    return kept[-1]
