"""Scratch memory of the rejection kernels, kept per launch shape and reused across calls."""

import dataclasses

import torch


@dataclasses.dataclass
class Workspace:
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

    @property
    def winners(self) -> tuple[torch.Tensor, ...]:
        """The kernels' ``winners`` argument."""
        return (self.winner_value, self.winner_token, self.fallback_value, self.fallback_token)

    @property
    def row_stats(self) -> tuple[torch.Tensor, ...]:
        """The kernels' ``row_stats`` argument."""
        return (
            self.target_max,
            self.target_argmax,
            self.target_sumexp,
            self.draft_max,
            self.draft_sumexp,
        )

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
_WORKSPACES: dict[tuple, list[Workspace]] = {}


def workspace_for(device, num_reqs, *shape) -> Workspace:
    kept = _WORKSPACES.setdefault((device, *shape), [])
    if not kept or kept[-1].capacity < num_reqs:
        capacity = max(num_reqs, 2 * kept[-1].capacity if kept else 16)
        kept.append(Workspace.allocate(capacity, device, *shape))
    return kept[-1]
