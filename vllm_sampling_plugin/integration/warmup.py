"""Compile every sampling kernel variant while the engine starts.

Triton compiles a kernel on first use for each new set of constexprs and
integer specializations (an int argument equal to 1 or divisible by 16 gets
its own binary), and the plugin's launch plans change both with the batch
size (the Gumbel kernel's chunking, the reduce kernel's block, the fused
top-k/top-p kernel merging in one launch or two, the rejection kernel's block
and launch style, the n-gram scan's splits). Left to the first request, a
new batch size mid-run costs a compile of about a second.

So the runner's profile run, after vLLM's own dummy sampler run, launches
every kernel the engine can use at **every** batch size it can sample
(1 .. max_num_reqs): complete by construction, whatever a plan depends on.
It runs in the engine's precision (FP32 or FP64: the other one cannot be
launched), through the same methods the sampling step calls
(``PluginSampler.draw``, ``PluginRejectionSampler.draw``,
``NgramProposerGPU.draft``), on zero logits and the zero-initialised request
state (greedy rows), and writes only scratch and outputs it throws away: it
never changes a token. Running inside the profile run also counts its
workspaces in the memory vLLM profiles.

The masked top-k/top-p route draws with the Gumbel kernel (its mask is
PyTorch), so it needs nothing of its own. EAGLE's drafter compiles its
Gumbel calls in its own dummy runs and CUDA-graph capture.
"""

from __future__ import annotations

import functools
import logging
import time
from typing import Any

import torch

from vllm_sampling_plugin.integration.ngram_speculator import NgramProposerGPU
from vllm_sampling_plugin.integration.rejection_sampler import PluginRejectionSampler
from vllm_sampling_plugin.integration.sampler import PluginSampler, Route

logger = logging.getLogger("vllm.vllm_sampling_plugin")


def warming_up_sampling(dummy_sampler_run):
    """Wrap ``GPUModelRunner._dummy_sampler_run`` to warm the plugin's kernels after it."""

    @functools.wraps(dummy_sampler_run)
    def _dummy_sampler_run(self, hidden_states: torch.Tensor) -> None:
        dummy_sampler_run(self, hidden_states)
        warm_up_sampling(self)

    _dummy_sampler_run.warms_up_sampling = True
    return _dummy_sampler_run


@torch.inference_mode()
def warm_up_sampling(runner: Any) -> list[str]:
    """Launch every plugin kernel the runner can use at every batch size.

    Returns (and logs, in one line) what was warmed up.
    """
    sampler = runner.sampler
    if not isinstance(sampler, PluginSampler):
        return []
    start = time.perf_counter()
    device = runner.device
    max_num_reqs = runner.max_num_reqs
    batch_sizes = range(1, max_num_reqs + 1)
    logits = torch.zeros(
        max_num_reqs, sampler.sampling_states.vocab_size, dtype=torch.float32, device=device
    )
    # Slots 0 .. n-1 for n requests; [: n + 1] is also the cu_num_logits of
    # one logit per request.
    counts = torch.arange(max_num_reqs + 1, dtype=torch.int32, device=device)
    positions = torch.zeros(max_num_reqs, dtype=torch.int64, device=device)

    # The masked route draws with the Gumbel kernel.
    routes = [Route.GUMBEL, Route.FUSED_TOP_K_TOP_P]
    if sampler.use_flashinfer:
        routes.append(Route.FLASHINFER)
    for route in routes:
        for n in batch_sizes:
            sampler.draw(route, logits[:n], counts[:n], positions[:n])
    warmed = [route.value for route in routes]

    rejection_sampler = runner.rejection_sampler
    if isinstance(rejection_sampler, PluginRejectionSampler):
        # The launch plan depends on the number of requests only, so one
        # logit (the bonus position) per request reaches every plan.
        draft_tokens = torch.zeros(
            max_num_reqs, dtype=runner.input_buffers.input_ids.dtype, device=device
        )
        draft_logits = getattr(runner.speculator, "draft_logits", None)
        for n in batch_sizes:
            rejection_sampler.draw(
                logits[:n],
                draft_tokens[:n],
                counts[: n + 1],
                counts[:n],
                positions[:n],
                draft_logits,
            )
        warmed.append(f"rejection_{rejection_sampler.rejection_sample_method}")

    speculator = runner.speculator
    if isinstance(speculator, NgramProposerGPU):
        num_sampled = torch.ones(max_num_reqs, dtype=torch.int32, device=device)
        fill_tokens = runner.req_states.last_sampled_tokens
        for n in batch_sizes:
            speculator.draft(counts[:n], num_sampled[:n], fill_tokens)
        warmed.append("ngram")

    if device.type == "cuda":
        torch.cuda.synchronize(device)
    logger.info(
        "vllm-sampling-plugin warm-up: compiled and ran %s in %s at every batch "
        "size 1..%d in %.1f s.",
        ", ".join(warmed),
        "FP64" if sampler.use_fp64_gumbel else "FP32",
        max_num_reqs,
        time.perf_counter() - start,
    )
    return warmed

