"""Compile every sampling kernel variant while the engine starts (the
``sample()`` draw shape: integration/warmup/ calls it).

Triton compiles a kernel on first use for each new set of constexprs and
integer specializations (an int argument equal to 1 or divisible by 16 gets
its own binary), and the plugin's launch plans change both with the batch
size (the Gumbel kernel's chunking, the reduce kernel's block, the fused
top-k/top-p kernel merging in one launch or two, the rejection kernel's block
and launch style, the n-gram scan's splits). Left to the first request, a
new batch size mid-run costs a compile of about a second.

So the runner's profile run, after vLLM's own dummy sampler run, launches
every kernel the engine can use at one batch size per compile variant of
1 .. max_num_reqs (``representatives``; the sampler's kernels up to
max_num_reqs x (1 + K) rows when n-gram drafts are verified by matching,
which draws every logit): the ``*_variant`` functions below
compute, from the plan functions the launchers call, everything a launch
derives from the batch size that reaches a compile key (constexprs, launch
options, which kernels launch, integer arguments as Triton specializes
them). Batch sizes with equal variants compile the same binaries, so one of
them warms all; ``tests/integration/warmup/test_warmup.py`` records the real
launches' compile keys at every batch size and checks that: about ten
launches instead of four per batch size, and the same compiles. FlashInfer's kernels are not Triton's, so that route still
runs at every batch size.

vLLM 0.20's V2 runner captures only the model forward (and the speculator's
own graphs; the n-gram speculator captures nothing) in CUDA graphs, never the
sampling step, so the capture sizes need nothing of the warm-up.

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

import logging
import time
from typing import Any

import torch

from vllm_sampling_plugin.integration.common.compile_variants import (
    fused_top_k_top_p_variant,
    gumbel_variant,
    integer_class,
    rejection_variant,
    representatives,
)
from vllm_sampling_plugin.integration.speculator.ngram_proposer_0_20 import NgramProposerGPU
from vllm_sampling_plugin.integration.verification.rejection_sampler_0_20 import PluginRejectionSampler
from vllm_sampling_plugin.integration.draw.sample import PluginSampler, Route
from vllm_sampling_plugin.ops.ngram.launcher import scan_shape
from vllm_sampling_plugin.ops.rejection import accept_matching_drafts

logger = logging.getLogger("vllm.vllm_sampling_plugin")


def ngram_variant(n: int, history_len: int, device: torch.device) -> tuple[int, str]:
    """The scan's block (a constexpr) and its split count (an integer argument)."""
    block, num_splits = scan_shape(n, history_len, device)
    return block, integer_class(num_splits)


@torch.inference_mode()
def warm_up_sampling(runner: Any) -> list[str]:
    """Launch every plugin kernel the runner can use at one batch size per
    compile variant (see the module docstring).

    Returns (and logs, in one line) what was warmed up.
    """
    sampler = runner.sampler
    if not isinstance(sampler, PluginSampler):
        return []
    start = time.perf_counter()
    device = runner.device
    max_num_reqs = runner.max_num_reqs
    vocab_size = sampler.sampling_states.vocab_size
    use_fp64 = sampler.use_fp64_gumbel
    launches = 0
    rejection_sampler = runner.rejection_sampler
    if not isinstance(rejection_sampler, PluginRejectionSampler):
        rejection_sampler = None
    draft_logits = getattr(runner.speculator, "draft_logits", None)
    matching = rejection_sampler is not None and rejection_sampler.verifies_by_matching(
        draft_logits)
    # Verifying by matching draws every logit: up to 1 + K rows per request.
    max_rows = max_num_reqs * (1 + rejection_sampler.num_speculative_steps if matching else 1)
    logits = torch.zeros(max_num_reqs, vocab_size, dtype=torch.float32, device=device)
    # The plugin's kernels read rows by stride: every row of ``rows`` is the
    # one zero row, whatever the batch.
    rows = logits[:1].expand(max_rows, vocab_size)
    # Slots 0 .. n-1 for n requests; [: n + 1] is also the cu_num_logits of
    # one logit per request.
    counts = torch.arange(max_num_reqs + 1, dtype=torch.int32, device=device)
    slots = torch.arange(max_rows, dtype=torch.int32, device=device) % max_num_reqs
    positions = torch.zeros(max_rows, dtype=torch.int64, device=device)

    # The masked route draws with the Gumbel kernel.
    batch_sizes = {
        Route.GUMBEL: representatives(
            max_rows, lambda n: gumbel_variant(n, vocab_size, use_fp64, device)
        ),
        Route.FUSED_TOP_K_TOP_P: representatives(
            max_rows, lambda n: fused_top_k_top_p_variant(n, vocab_size)
        ),
    }
    if sampler.use_flashinfer:
        batch_sizes[Route.FLASHINFER] = list(range(1, max_num_reqs + 1))
    for route, sizes in batch_sizes.items():
        for n in sizes:
            batch = logits[:n] if route is Route.FLASHINFER else rows[:n]
            sampler.draw(route, batch, slots[:n], positions[:n])
        launches += len(sizes)
    warmed = [route.value for route in batch_sizes]

    draft_tokens = torch.zeros(
        max_num_reqs, dtype=runner.input_buffers.input_ids.dtype, device=device
    )
    if matching:
        # One compile variant: the output width is the engine's K + 1; the
        # sampler's tokens are int64, the drafts the runner's input ids.
        accept_matching_drafts(
            positions[:1], draft_tokens[:1], counts[:2], rejection_sampler.num_speculative_steps
        )
        launches += 1
        warmed.append("matching_verification")
    elif rejection_sampler is not None:
        # The launch plan depends on the number of requests only, so one
        # logit (the bonus position) per request reaches every plan.
        sizes = representatives(
            max_num_reqs, lambda n: rejection_variant(n, vocab_size, use_fp64, device)
        )
        for n in sizes:
            rejection_sampler.draw(
                logits[:n],
                draft_tokens[:n],
                counts[: n + 1],
                counts[:n],
                positions[:n],
                draft_logits,
            )
        launches += len(sizes)
        warmed.append(f"rejection_{rejection_sampler.rejection_sample_method}")

    speculator = runner.speculator
    if isinstance(speculator, NgramProposerGPU):
        num_sampled = torch.ones(max_num_reqs, dtype=torch.int32, device=device)
        fill_tokens = runner.req_states.last_sampled_tokens
        # The history the drafts scan (NgramProposerGPU.draft).
        history_len = speculator.req_states.all_token_ids.gpu.shape[1]
        sizes = representatives(
            max_num_reqs, lambda n: ngram_variant(n, history_len, device)
        )
        for n in sizes:
            speculator.draft(counts[:n], num_sampled[:n], fill_tokens)
        launches += len(sizes)
        warmed.append("ngram")

    if device.type == "cuda":
        torch.cuda.synchronize(device)
    logger.info(
        "vllm-sampling-plugin warm-up: compiled and ran %s in %s, %d launches "
        "covering every batch size 1..%d, in %.1f s.",
        ", ".join(warmed),
        "FP64" if use_fp64 else "FP32",
        launches,
        max_num_reqs,
        time.perf_counter() - start,
    )
    return warmed

