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
list per capture size; 0.32 to 0.34 keep a dict keyed by (token count,
LoRA case), one list per key, and their descriptors carry the LoRA case
(``lora_capture_cases``; 0.33.0 ``cudagraph_utils.py:376-389``). A one-token
batch then has uniform_token_count 1 (``get_uniform_decode_token_count``,
``v1/worker/utils.py:967``) and, without these graphs, dispatches to the
piecewise candidate (0.33.0 ``cudagraph_utils.py:523-553``).

A decode step in which some requests verify drafts and others do not is not
uniform either (``get_uniform_token_count`` gives None), and vLLM runs it
piecewise: on a small model that is slower than fixed k, whose steps are
uniform. Where every attention backend of the target model replays any batch
from a full graph (``AttentionCGSupport.ALWAYS``: FlashAttention with FA3,
0.20 ``flash_attn.py:295-299``, 0.33.0 ``flash_attn.py:619-623``), the plugin
also captures full graphs for such *mixed-length decode* steps, replayed only
for a step without prefill (every request schedules at most ``1 + k``
tokens). How a release tells a decode step from one with a prefill decides
the route:

* 0.32 to 0.34: ``dispatch`` takes the step's longest query
  (``max_query_len``, None for a step with a prefill; 0.33.0
  ``model_runner.py:1802-1811``, 0.34.0 ``model_runner.py:1865-1873``) and
  descriptors bound it, the way upstream's own variable-length decode graphs
  for its adaptive verification do (``varlen_decode``, 0.33.0
  ``cudagraph_utils.py:302-320``, 0.34.0 ``:313-330``). The plugin adds
  the same descriptors: ``min(tokens, max_num_seqs)`` requests of at most
  ``1 + k`` tokens at every capture size up to ``max_num_seqs * (1 + k)``,
  after vLLM's full graphs of each size, and vLLM's ``dispatch`` picks them.
* 0.20: ``dispatch(num_reqs, num_tokens, uniform_token_count)`` takes only
  the batch shape. The plugin captures ``max_num_seqs`` requests at every
  capture size above ``max_num_seqs`` up to ``max_num_seqs * (1 + k)``
  tokens (below that, the one-token graphs of the size serve, having a
  request slot per token), and a wrapper on ``dispatch`` replays them when
  the runner's ``execute_model`` wrapper has noted that the step has no
  prefill.

From 0.34 the manager is built with the uniform decode query lengths it
captures (``decode_query_lens``, query length -> most requests; 0.34.0
``cudagraph_utils.py:150-190``), which dynamic speculation already uses for
several lengths: the plugin adds the one-token length to that map
(:func:`adding_one_token_decode_query`) and upstream captures and dispatches
those graphs itself; the mixed-length decode graphs are added as on 0.32 and
0.33, and uniform steps keep upstream's uniform graphs. Without them a chat
workload's steps (some requests drafting, some not) run piecewise, slower
than fixed k at the same acceptance (docs/benchmarks.md has the measurement).

One log line says which way the engine went.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import logging
from typing import Any

from vllm.config import CUDAGraphMode
from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor

from vllm_sampling_plugin.integration.common.log_once import log_once
from vllm_sampling_plugin.integration.speculator.speculation_policy import is_adaptive

logger = logging.getLogger("vllm.vllm_sampling_plugin")

# On the target model's CUDA graph manager: the descriptor each token count
# of a mixed-length decode step replays (a list indexed by token count), or
# None where the engine has no such graphs (the class default).
MIXED_DECODE_GRAPHS_ATTR = "vllm_sampling_plugin_mixed_decode_graphs"
# On the same manager, set each step: no request schedules more than 1 + k tokens.
DECODE_STEP_ATTR = "vllm_sampling_plugin_decode_step"
# The 0.20 shape of ``dispatch``: the batch shape and nothing else.
_SHAPE_ONLY_DISPATCH = ["self", "num_reqs", "num_tokens", "uniform_token_count"]


def takes_decode_query_lens(manager_cls: Any) -> bool:
    """0.34's manager: built with the decode query lengths it captures."""
    return "decode_query_lens" in inspect.signature(manager_cls.__init__).parameters


def adding_one_token_decode_query(init):
    """Wrap 0.34's ``ModelCudaGraphManager.__init__``: under the adaptive
    policy a step without drafts is a uniform one-token decode batch, so
    its graphs are captured beside those of ``1 + k`` tokens a request."""
    signature = inspect.signature(init)

    @functools.wraps(init)
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        bound = signature.bind(self, *args, **kwargs)
        vllm_config = bound.arguments["vllm_config"]
        query_lens = bound.arguments["decode_query_lens"]
        if 1 not in query_lens and is_adaptive(vllm_config):
            bound.arguments["decode_query_lens"] = {
                1: vllm_config.scheduler_config.max_num_seqs, **query_lens,
            }
            log_once(
                logging.INFO,
                "vllm-sampling-plugin: full CUDA graphs of one-token decode steps are "
                f"captured beside those of {max(query_lens)} tokens a request "
                "(adaptive speculation policy).",
            )
        init(*bound.args, **bound.kwargs)

    return __init__


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


def adding_mixed_decode_graphs(capture):
    """Wrap ``ModelCudaGraphManager.capture`` to add, before capturing, the
    full graphs of mixed-length decode steps where the target model's
    attention can replay them (its ``attn_groups`` argument tells)."""
    signature = inspect.signature(capture)

    @functools.wraps(capture)
    def _capture(self, *args: Any, **kwargs: Any) -> None:
        if needs_single_token_graphs(self):
            attn_groups = signature.bind(self, *args, **kwargs).arguments["attn_groups"]
            reason = _why_no_mixed_decode_graphs(self, attn_groups)
            if reason is None:
                _add_mixed_decode_graphs(self)
            else:
                logger.info("vllm-sampling-plugin adaptive speculation: decode steps of mixed draft lengths run piecewise CUDA graphs (%s).", reason)
        capture(self, *args, **kwargs)

    return _capture


def dispatching_mixed_decode_steps(dispatch):
    """Wrap ``ModelCudaGraphManager.dispatch`` (inherited from
    ``CudaGraphManager``): a decode step of mixed lengths
    replays its full graph where the manager has one; everything else is
    vLLM's choice."""

    @functools.wraps(dispatch)
    def _dispatch(self, num_reqs: int, num_tokens: int, uniform_token_count: int | None):
        graphs = getattr(self, MIXED_DECODE_GRAPHS_ATTR)
        if (
            graphs is not None
            and uniform_token_count is None
            and num_tokens < len(graphs)
            and self._graphs_captured
            and getattr(self, DECODE_STEP_ATTR, False)
        ):
            return graphs[num_tokens]
        return dispatch(self, num_reqs, num_tokens, uniform_token_count)

    return _dispatch


def noting_decode_steps(execute_model):
    """Wrap ``GPUModelRunner.execute_model`` to tell a manager with
    mixed-length decode graphs whether this step is decode only."""

    @functools.wraps(execute_model)
    def _execute_model(self, scheduler_output, *args: Any, **kwargs: Any):
        manager = self.cudagraph_manager
        if getattr(manager, MIXED_DECODE_GRAPHS_ATTR, None) is not None:
            query_lens = scheduler_output.num_scheduled_tokens.values()
            setattr(manager, DECODE_STEP_ATTR, max(query_lens, default=0) <= manager.decode_query_len)
        return execute_model(self, scheduler_output, *args, **kwargs)

    return _execute_model


def dispatch_takes_only_the_shape(manager_cls: Any) -> bool:
    return list(inspect.signature(manager_cls.dispatch).parameters) == _SHAPE_ONLY_DISPATCH


def dispatch_bounds_the_query_length(manager_cls: Any) -> bool:
    """0.32 to 0.34: descriptors bound the longest query and ``dispatch`` takes it."""
    return "max_query_len" in inspect.signature(manager_cls.dispatch).parameters and (
        "max_query_len" in {field.name for field in dataclasses.fields(BatchExecutionDescriptor)}
    )


def _why_no_mixed_decode_graphs(manager: Any, attn_groups: list[list[Any]]) -> str | None:
    manager_cls = type(manager)
    if not (dispatch_takes_only_the_shape(manager_cls) or dispatch_bounds_the_query_length(manager_cls)):
        return "this vLLM's dispatch tells decode steps from prefills in a way not adapted yet"
    if manager.dp_size > 1:
        return "data parallel ranks must agree on the graph of each step"
    from vllm.v1.attention.backend import AttentionCGSupport

    for groups in attn_groups:
        for group in groups:
            builder = group.get_metadata_builder(0)
            support = builder.get_cudagraph_support(manager.vllm_config, group.kv_cache_spec)
            if support != AttentionCGSupport.ALWAYS:
                return f"{type(builder).__name__} supports full graphs for {support.name} batches only"
    return None


def _add_mixed_decode_graphs(manager: Any) -> None:
    max_tokens = min(
        manager.max_num_reqs * manager.decode_query_len,
        manager.compilation_config.max_cudagraph_capture_size,
    )
    sizes = sorted(n for n in set(manager.compilation_config.cudagraph_capture_sizes) if n <= max_tokens)
    if dispatch_takes_only_the_shape(type(manager)):
        added, largest = _add_shape_dispatched_graphs(manager, sizes)
    else:
        added, largest = _add_query_bounded_graphs(manager, sizes)
    if largest == 0:
        return
    descs = manager._capture_descs[CUDAGraphMode.FULL] + added
    descs.sort(key=lambda d: d.num_tokens, reverse=True)
    manager._capture_descs[CUDAGraphMode.FULL] = descs
    logger.info(
        "vllm-sampling-plugin adaptive speculation: full CUDA graphs for decode steps of mixed draft lengths up to %d tokens (%d more captured).",
        largest,
        len(added),
    )


def _add_shape_dispatched_graphs(manager: Any, sizes: list[int]) -> tuple[list[Any], int]:
    """0.20: graphs of max_num_seqs request slots, and the table the
    ``dispatch`` wrapper reads (indexed by token count)."""
    max_reqs = manager.max_num_reqs
    one_token = [d for d in manager._capture_descs[CUDAGraphMode.FULL] if d.uniform_token_count == 1]
    added = [
        BatchExecutionDescriptor(cg_mode=CUDAGraphMode.FULL, num_tokens=n, num_reqs=max_reqs)
        for n in sizes
        if n > max_reqs
    ]
    # A step of R requests and T > R tokens fits a graph of T' >= T tokens
    # with a slot per request: the one-token graphs have T' slots, the added ones max_num_seqs.
    by_size = sorted(one_token + added, key=lambda d: d.num_tokens)
    if not by_size:
        return [], 0
    table = [next(d for d in by_size if d.num_tokens >= n) for n in range(by_size[-1].num_tokens + 1)]
    setattr(manager, MIXED_DECODE_GRAPHS_ATTR, table)
    return added, len(table) - 1


def _add_query_bounded_graphs(manager: Any, sizes: list[int]) -> tuple[list[Any], int]:
    """0.32 to 0.34: graphs whose descriptors bound the longest query at
    ``1 + k``, placed after vLLM's full graphs among each token count's
    candidates, so that uniform steps keep theirs and a step with a prefill
    (``max_query_len`` None) matches none of them."""
    captured = set(manager._capture_descs.get(CUDAGraphMode.FULL, []))
    added = []
    for case in manager.lora_capture_cases:
        descs = [
            BatchExecutionDescriptor(
                cg_mode=CUDAGraphMode.FULL,
                num_tokens=n,
                num_reqs=min(n, manager.max_num_reqs),
                max_query_len=manager.decode_query_len,
                num_active_loras=case,
            )
            for n in sizes
        ]
        # Upstream's adaptive verification captures the same descriptors itself.
        added += [d for d in descs if d not in captured]
        for (num_tokens, key_case), candidates in manager._candidates.items():
            desc = next((d for d in descs if d.num_tokens >= num_tokens), None)
            if key_case != case or desc is None or desc in candidates:
                continue
            after_full = next((i for i, d in enumerate(candidates) if d.cg_mode != CUDAGraphMode.FULL), len(candidates))
            candidates.insert(after_full, desc)
    return added, (sizes[-1] if sizes else 0)
