"""Full CUDA graphs for decode steps in which no request verifies a draft.

With speculation configured, vLLM's V2 runner captures its full decode
graphs for one batch shape only: every request running 1 + k tokens
(``CudaGraphManager._init_candidates`` with ``decode_query_len = 1 + k``;
0.33.0 ``cudagraph_utils.py:319-342``).
Under the adaptive speculation policy a step where nothing was proposed runs
one token per request, which those graphs do not match, so it would fall
back to piecewise graphs (attention outside the graph): slower than the
same step without speculation. This adds, to the target model's manager
only, the full graphs vLLM captures without speculation (one token per
request, at every capture size up to max_num_seqs), and puts them first
among the candidates of their size; ``dispatch`` then picks them for
uniform one-token batches and skips them for every other shape
(``_is_compatible`` compares the uniform token count).

The candidate table differs by release, and the layout in use is read off
the manager: 0.20 keeps a list indexed by token count whose slots share one
list per capture size; 0.32 and 0.33 keep a dict keyed by (token count,
LoRA case), one list per key, and their descriptors carry the LoRA case
(``lora_capture_cases``; 0.33.0 ``cudagraph_utils.py:376-389``). A one-token
batch then has uniform_token_count 1 (``get_uniform_decode_token_count``,
``v1/worker/utils.py:967``) and, without these graphs, dispatches to the
piecewise candidate (0.33.0 ``cudagraph_utils.py:523-553``).
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
    # 0.32 and later: one graph per LoRA case, candidates keyed by (tokens, case).
    lora_cases = getattr(manager, "lora_capture_cases", None)
    sizes = [
        n for n in sorted(set(manager.compilation_config.cudagraph_capture_sizes))
        if n <= manager.max_num_reqs
    ]
    added = []
    for case in lora_cases or [None]:
        extra = {} if case is None else {"num_active_loras": case}
        descs = [
            BatchExecutionDescriptor(
                cg_mode=CUDAGraphMode.FULL,
                num_tokens=n,
                num_reqs=n,
                uniform_token_count=1,
                **extra,
            )
            for n in sizes
        ]
        added += descs
        if case is None:
            slots = enumerate(manager._candidates)
        else:
            slots = (
                (num_tokens, candidates)
                for (num_tokens, key_case), candidates in manager._candidates.items()
                if key_case == case
            )
        for num_tokens, candidates in slots:
            desc = next((d for d in descs if d.num_tokens >= num_tokens), None)
            # 0.20's slots of one capture size share a list: add it once.
            if desc is not None and desc not in candidates:
                candidates.insert(0, desc)
    descs = manager._capture_descs.get(CUDAGraphMode.FULL, []) + added
    descs.sort(key=lambda d: d.num_tokens, reverse=True)
    manager._capture_descs[CUDAGraphMode.FULL] = descs
