"""Full CUDA graphs for decode steps in which no request verifies a draft.

With speculation configured, vLLM 0.20's V2 runner captures its full decode
graphs for one batch shape only: every request running 1 + k tokens
(``CudaGraphManager._init_candidates`` with ``decode_query_len = 1 + k``).
Under the adaptive speculation policy a step where nothing was proposed runs
one token per request, which those graphs do not match, so it would fall
back to piecewise graphs (attention outside the graph): slower than the
same step without speculation. This adds, to the target model's manager
only, the full graphs vLLM captures without speculation (one token per
request, at every capture size up to max_num_seqs), and puts them first
among the candidates of their size; ``dispatch`` then picks them for
uniform one-token batches and skips them for every other shape
(``_is_compatible`` compares the uniform token count).
"""

from __future__ import annotations

import functools
from typing import Any

from vllm.config import CUDAGraphMode
from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor

from vllm_sampling_plugin.integration.speculation_policy import is_adaptive


def adding_single_token_decode_graphs(init_candidates):
    """Wrap ``_init_candidates`` of the target model's CUDA graph manager."""

    @functools.wraps(init_candidates)
    def _init_candidates(self) -> None:
        init_candidates(self)
        if needs_single_token_graphs(self):
            _add_single_token_graphs(self)

    return _init_candidates


def needs_single_token_graphs(manager: Any) -> bool:
    return (
        manager.decode_query_len > 1
        and bool(manager._candidates)
        and is_adaptive(manager.vllm_config)
        and manager.cudagraph_mode.separate_routine()
        and manager.cudagraph_mode.decode_mode() == CUDAGraphMode.FULL
    )


def _add_single_token_graphs(manager: Any) -> None:
    added = []
    for num_tokens in sorted(set(manager.compilation_config.cudagraph_capture_sizes)):
        if num_tokens > manager.max_num_reqs:
            break
        desc = BatchExecutionDescriptor(
            cg_mode=CUDAGraphMode.FULL,
            num_tokens=num_tokens,
            num_reqs=num_tokens,
            uniform_token_count=1,
        )
        # One list object serves every size that pads up to num_tokens.
        manager._candidates[num_tokens].insert(0, desc)
        added.append(desc)
    descs = manager._capture_descs.get(CUDAGraphMode.FULL, []) + added
    descs.sort(key=lambda d: d.num_tokens, reverse=True)
    manager._capture_descs[CUDAGraphMode.FULL] = descs
