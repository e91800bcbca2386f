"""What of a batch size reaches a kernel's compile key, for the start-up warm-ups.

Triton compiles a kernel once per set of constexprs and integer
specializations; the launchers derive both from the batch size through their
plan functions. These helpers compute that part of a launch, so a warm-up can
launch one batch size per compile variant (``representatives``). They import
nothing of vLLM: integration/warmup/sample.py (the sample() draw shape) and
integration/warmup/ (the other shapes) share them.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

import torch

from vllm_sampling_plugin.ops.gumbel.plan import plan_launch as gumbel_plan
from vllm_sampling_plugin.ops.rejection.launcher import device_plan as rejection_plan
from vllm_sampling_plugin.ops.rejection.plan import TUNING as REJECTION_TUNING
from vllm_sampling_plugin.ops.topk_topp.plan import DEFAULT_TUNING as TOP_K_TOP_P_TUNING
from vllm_sampling_plugin.ops.topk_topp.plan import launch_shape as top_k_top_p_shape
from vllm_sampling_plugin.ops.topk_topp.plan import merges_in_chunk_kernel


def integer_class(value: int) -> str:
    """What Triton's compile key keeps of an integer argument: equal to 1,
    divisible by 16, or neither."""
    if value == 1:
        return "one"
    return "multiple_of_16" if value % 16 == 0 else "other"


def gumbel_variant(n: int, vocab_size: int, use_fp64: bool, device: torch.device):
    """The Gumbel launcher's plan: tile, chunking (whether the reduce kernel
    runs and its block) and warps all come from it."""
    return gumbel_plan(n, vocab_size, use_fp64, device)


def fused_top_k_top_p_variant(n: int, vocab_size: int) -> bool:
    """The fused launcher's shape depends on the vocabulary only; the batch
    decides whether rows merge in the chunk kernel or in a second one."""
    shape = top_k_top_p_shape(vocab_size, TOP_K_TOP_P_TUNING)
    return merges_in_chunk_kernel(n, shape, TOP_K_TOP_P_TUNING)


def rejection_variant(n: int, vocab_size: int, use_fp64: bool, device: torch.device):
    """The rejection launcher's plan for ``n`` requests: block, chunks, warps
    and launch style (the integration passes the default tuning)."""
    return rejection_plan(n, vocab_size, REJECTION_TUNING[use_fp64], device)


def representatives(max_num_reqs: int, variant: Callable[[int], Hashable]) -> list[int]:
    """The smallest batch size of each distinct ``variant`` over 1 .. max_num_reqs.

    Example::

        >>> representatives(40, lambda n: n >= 17)
        [1, 17]
    """
    first: dict[Hashable, int] = {}
    for n in range(1, max_num_reqs + 1):
        first.setdefault(variant(n), n)
    return sorted(first.values())
