"""The warm-up seam: the plugin's kernels compile in the runner's dummy
sampler run (part of vLLM's profile run), never on a request.

One wrapper around ``GPUModelRunner._dummy_sampler_run`` (present in every
release from 0.20 to 0.33) warms up whatever the plugin took: with the
``sample()`` draw shape, integration/warmup/sample.py's warm-up of every route,
the rejection kernel and the n-gram scan; with the other shapes, the draw
below.

The draw's warm-up: without it the first request of each kind compiles its
kernels, seconds of waiting (docs/benchmarks.md).

So the runner's dummy sampler run (part of vLLM's profile run, after which
its memory is measured) is followed by one launch of the plugin's Gumbel-max
and fused top-k/top-p kernels per compile variant of 1 .. max_num_reqs rows
(integration/common/compile_variants.py), through the methods the step calls
(``draw_gumbel``, ``draw_top_k_top_p``), in the engine's precision and noise
stream, with the runner's dtypes (request slots in the dtype its steps use,
:func:`step_slot_dtypes`; int64 positions; logits in float32 and in the
model's dtype: upstream copies them to float32 only when some request needs
processing, so a greedy batch reaches the draw in bfloat16), on zero logits
and the zero-initialised request state.
It writes only its outputs, which it drops: no token changes. Upstream's
speculative verification draws with its own kernels, so the plugin's draw
sees at most max_num_reqs rows, except where the plugin verifies
(``--plugin-verification plugin``, 0.32/0.33): there the verifier first
compiles its own kernels
(``PluginVerifyingRejectionSampler.warm_up_verification``: the rejection
kernel per launch plan, logits dtype and filtering, and the matching
kernel), and a batch of greedy requests, or of n-gram drafts with a seeded
request, is verified by matching the Sampler's draws of every logit, so the
draw is warmed up to max_num_reqs x (1 + K) rows. Where the user keeps FlashInfer
(``VLLM_USE_FLASHINFER_SAMPLER=1``) its batches stay upstream's, and so does
their first-use cost.
"""

from __future__ import annotations

import functools
import inspect
import logging
import re
import sys
import time
from typing import Any

import torch

from vllm_sampling_plugin.integration.common.compile_variants import (
    fused_top_k_top_p_variant,
    gumbel_variant,
    representatives,
)
from vllm_sampling_plugin.integration.draw.plugin_draw import PluginDrawMixin
from vllm_sampling_plugin.integration.common.found import Found
from vllm_sampling_plugin.integration.common import shapes
from vllm_sampling_plugin.integration.common.shapes import AFTER_DUMMY_SAMPLER_RUN
from vllm_sampling_plugin.ops.compile_ahead import compile_ahead
from vllm_sampling_plugin.ops.compile_ahead import supported as compile_ahead_supported

logger = logging.getLogger("vllm.vllm_sampling_plugin")

NAME = shapes.WARM_UP
# Marks the wrapper, so that applying twice wraps once.
_MARKER = "warms_up_plugin_kernels"

# How the runner's steps build the request slots they hand the sampler: a
# NumPy array, copied to the GPU in its own dtype unless the copy names one.
_HOST_SLOTS = re.compile(r"idx_mapping_np\s*=\s*np\.fromiter\([^)]*dtype=np\.(\w+)")
_GPU_SLOTS = re.compile(r"\bidx_mapping\s*=\s*async_\w+\(\s*idx_mapping_np\b([^)]*)\)")
_NAMED_DTYPE = re.compile(r"dtype=torch\.(\w+)")
_TORCH_INT = {"int32": torch.int32, "int64": torch.int64, "intp": torch.int64}


def detect(draw_found: Found) -> Found:
    from vllm.v1.worker.gpu.model_runner import GPUModelRunner

    if not draw_found.is_taken:
        return Found.off(NAME, "the plugin draws nothing")
    dummy_sampler_run = getattr(GPUModelRunner, "_dummy_sampler_run", None)
    if dummy_sampler_run is None:
        return Found.off(NAME, "GPUModelRunner has no _dummy_sampler_run")
    params = list(inspect.signature(dummy_sampler_run).parameters)
    if params != ["self", "hidden_states"]:
        return Found.off(NAME, f"_dummy_sampler_run{tuple(params[1:])} is not (hidden_states,)")
    return Found.taken(NAME, AFTER_DUMMY_SAMPLER_RUN)


def apply(shape: str) -> None:
    from vllm.v1.worker.gpu.model_runner import GPUModelRunner

    if not getattr(GPUModelRunner._dummy_sampler_run, _MARKER, False):
        GPUModelRunner._dummy_sampler_run = warming_up(GPUModelRunner._dummy_sampler_run)


def warming_up(dummy_sampler_run):
    """Wrap ``GPUModelRunner._dummy_sampler_run`` to warm the plugin's kernels up after it."""

    @functools.wraps(dummy_sampler_run)
    def _dummy_sampler_run(self, hidden_states: torch.Tensor) -> None:
        dummy_sampler_run(self, hidden_states)
        warm_up(self)

    setattr(_dummy_sampler_run, _MARKER, True)
    return _dummy_sampler_run


@functools.cache
def step_slot_dtypes() -> tuple[torch.dtype, ...]:
    """The dtype of the request slots (``expanded_idx_mapping``) the runner's
    steps hand the sampler: int32 through 0.27 and on 0.31, int64 on 0.28-0.30
    and from 0.32.

    Triton compiles a kernel per pointer dtype, so a warm-up in another dtype
    compiles nothing the steps use (the first requests then compile them:
    docs/benchmarks.md). It is read from the runner's module, where the steps
    build the slots as a NumPy array (``np.int32``, or ``np.intp`` from 0.28)
    and copy it to the GPU, in its own dtype unless the copy names one (0.31
    names int32, 0.32 int64). The runner's dummy batch is no guide (0.31's
    is int32 and 0.30's int64 from the same ``np.intp``). Both dtypes where
    the source says nothing or more than one thing.
    """
    from vllm.v1.worker.gpu.model_runner import GPUModelRunner

    try:
        source = inspect.getsource(sys.modules[GPUModelRunner.__module__])
    except (OSError, TypeError):  # installed without its sources
        return (torch.int32, torch.int64)
    copies = _GPU_SLOTS.findall(source)
    named = {match.group(1) for args in copies if (match := _NAMED_DTYPE.search(args))}
    if copies and len(named) == len(copies):
        found = {_TORCH_INT.get(name) for name in named}
    else:
        found = {_TORCH_INT.get(name) for name in _HOST_SLOTS.findall(source)}
    if len(found) == 1 and None not in found:
        return (found.pop(),)
    return (torch.int32, torch.int64)


def warm_up(runner: Any) -> None:
    """Warm up the kernels of whichever plugin sampler the runner holds:
    their variants compiled ahead, in parallel (:func:`compile_in_parallel`),
    then launched."""
    if isinstance(runner.sampler, PluginDrawMixin):
        compile_in_parallel(lambda: warm_up_draw(runner))
        warm_up_draw(runner)
    else:
        from vllm_sampling_plugin.integration.warmup.sample import warm_up_sampling

        compile_in_parallel(lambda: warm_up_sampling(runner))
        warm_up_sampling(runner)


def warm_up_draw(runner: Any) -> None:
    """The draw's warm-up, after the verifier's where the plugin verifies."""
    logits_dtypes = (torch.float32, runner.model_config.dtype)
    max_rows = runner.max_num_reqs
    # The plugin's verification (0.32/0.33): its kernels, and how many
    # rows its matching has the Sampler draw (1 + K a request).
    warm_up_verification = getattr(
        getattr(runner, "rejection_sampler", None), "warm_up_verification", None
    )
    if warm_up_verification is not None:
        max_rows = warm_up_verification(
            runner.max_num_reqs,
            runner.device,
            logits_dtypes,
            step_slot_dtypes(),
            getattr(runner.speculator, "draft_logits", None),
        )
    warm_up_plugin_draw(
        runner.sampler,
        runner.max_num_reqs,
        runner.device,
        logits_dtypes,
        step_slot_dtypes(),
        max_rows,
    )


@torch.inference_mode()
def compile_in_parallel(launches) -> int:
    """Compile every kernel variant ``launches()`` launches, on every CPU at
    once, without running them (ops/compile_ahead.py; its own log lines are
    held back: the launches that follow say what they ran). One log line;
    returns the number of variants."""
    start = time.perf_counter()
    previously_disabled = logger.disabled
    logger.disabled = True
    try:
        compiled = compile_ahead(launches)
    finally:
        logger.disabled = previously_disabled
    if compiled:
        logger.info(
            "vllm-sampling-plugin warm-up: compiled %d Triton kernel variants in parallel in "
            "%.1f s; the launches below find them compiled.",
            compiled,
            time.perf_counter() - start,
        )
    elif not compile_ahead_supported():
        logger.info(
            "vllm-sampling-plugin warm-up: this Triton cannot compile ahead "
            "(no triton.runtime._async_compile): the launches below compile one at a time."
        )
    return compiled


@torch.inference_mode()
def warm_up_plugin_draw(
    sampler: Any,
    max_num_reqs: int,
    device: torch.device,
    logits_dtypes: tuple[torch.dtype, ...] = (torch.float32,),
    slot_dtypes: tuple[torch.dtype, ...] = (torch.int64,),
    max_rows: int | None = None,
) -> dict[str, list[int]]:
    """Launch the plugin's draw kernels once per compile variant of 1 ..
    ``max_rows`` rows (default ``max_num_reqs``; more where a step draws
    several logits a request), logits dtype and request-slot dtype; returns
    (and logs in one line) the batch sizes launched per kernel."""
    if not isinstance(sampler, PluginDrawMixin):
        return {}
    start = time.perf_counter()
    use_fp64 = sampler.use_fp64_gumbel
    vocab_size = sampler.sampling_states.vocab_size
    dtypes = list(dict.fromkeys(logits_dtypes))
    max_rows = max_rows or max_num_reqs
    positions = torch.zeros(max_rows, dtype=torch.int64, device=device)
    launched = {
        "gumbel": representatives(
            max_rows, lambda n: gumbel_variant(n, vocab_size, use_fp64, device)
        ),
        "fused_top_k_top_p": representatives(
            max_rows, lambda n: fused_top_k_top_p_variant(n, vocab_size)
        ),
    }
    draws = {"gumbel": sampler.draw_gumbel, "fused_top_k_top_p": sampler.draw_top_k_top_p}
    for dtype in dtypes:
        # Every row reads the one zero row (the kernels take rows by stride).
        rows = torch.zeros(1, vocab_size, dtype=dtype, device=device).expand(
            max_rows, vocab_size
        )
        for slot_dtype in slot_dtypes:
            slots = torch.arange(max_rows, dtype=slot_dtype, device=device) % max_num_reqs
            for kernel, sizes in launched.items():
                for n in sizes:
                    draws[kernel](rows[:n], slots[:n], positions[:n])
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    logger.info(
        "vllm-sampling-plugin warm-up: compiled and ran %s in %s on %s logits and %s "
        "request slots, batch sizes %s, covering every batch size 1..%d, in %.1f s.",
        ", ".join(launched),
        f"FP64 ({sampler.fp64_stream})" if use_fp64 else f"FP32 ({sampler.fp32_stream})",
        " and ".join(str(dtype).removeprefix("torch.") for dtype in dtypes),
        " and ".join(str(dtype).removeprefix("torch.") for dtype in slot_dtypes),
        "; ".join(f"{kernel} {sizes}" for kernel, sizes in launched.items()),
        max_rows,
        time.perf_counter() - start,
    )
    return launched
