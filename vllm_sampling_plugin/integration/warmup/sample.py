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

import dataclasses
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


@dataclasses.dataclass(frozen=True)
class _Buffers:
    """What every warm-up launch reads: zero logits and the slots,
    positions and counts of up to ``max_rows`` rows."""

    logits: torch.Tensor  # [max_num_reqs, V] float32 zeros
    rows: torch.Tensor  # [max_rows, V]: every row the one zero row, read by stride
    # [max_num_reqs + 1]: 0 .. max_num_reqs; [: n + 1] is also the
    # cu_num_logits of one logit per request
    counts: torch.Tensor
    slots: torch.Tensor  # [max_rows] int32: request slots 0 .. max_num_reqs - 1, repeated
    positions: torch.Tensor  # [max_rows] int64 zeros
    draft_tokens: torch.Tensor  # [max_num_reqs] zeros, in the runner's input-id dtype


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
    rejection_sampler = runner.rejection_sampler
    if not isinstance(rejection_sampler, PluginRejectionSampler):
        rejection_sampler = None
    draft_logits = getattr(runner.speculator, "draft_logits", None)
    matching = rejection_sampler is not None and rejection_sampler.verifies_by_matching(
        draft_logits)
    # Verifying by matching draws every logit: up to 1 + K rows per request.
    max_rows = runner.max_num_reqs * (
        1 + rejection_sampler.num_speculative_steps if matching else 1)
    buffers = _buffers(runner, sampler.sampling_states.vocab_size, max_rows)
    warmed = _warm_up_draws(sampler, buffers, runner.device)
    if matching:
        warmed.update(_warm_up_matching(rejection_sampler, buffers))
    elif rejection_sampler is not None:
        warmed.update(_warm_up_rejection(rejection_sampler, buffers, draft_logits,
                                         sampler.use_fp64_gumbel, runner.device))
    if isinstance(runner.speculator, NgramProposerGPU):
        warmed.update(_warm_up_ngram(runner, buffers))
    if runner.device.type == "cuda":
        torch.cuda.synchronize(runner.device)
    logger.info(
        "vllm-sampling-plugin warm-up: compiled and ran %s in %s, %d launches "
        "covering every batch size 1..%d, in %.1f s.",
        ", ".join(warmed),
        "FP64" if sampler.use_fp64_gumbel else "FP32",
        sum(warmed.values()),
        runner.max_num_reqs,
        time.perf_counter() - start,
    )
    return list(warmed)


def _buffers(runner: Any, vocab_size: int, max_rows: int) -> _Buffers:
    device, max_num_reqs = runner.device, runner.max_num_reqs
    logits = torch.zeros(max_num_reqs, vocab_size, dtype=torch.float32, device=device)
    return _Buffers(
        logits=logits,
        rows=logits[:1].expand(max_rows, vocab_size),
        counts=torch.arange(max_num_reqs + 1, dtype=torch.int32, device=device),
        slots=torch.arange(max_rows, dtype=torch.int32, device=device) % max_num_reqs,
        positions=torch.zeros(max_rows, dtype=torch.int64, device=device),
        draft_tokens=torch.zeros(
            max_num_reqs, dtype=runner.input_buffers.input_ids.dtype, device=device),
    )


def _warm_up_draws(sampler: PluginSampler, buffers: _Buffers,
                   device: torch.device) -> dict[str, int]:
    """Each draw route at one batch size per variant (FlashInfer's at every
    size); the masked route draws with the Gumbel kernel. Launches by route."""
    max_rows, vocab_size = buffers.rows.shape
    use_fp64 = sampler.use_fp64_gumbel
    batch_sizes = {
        Route.GUMBEL: representatives(
            max_rows, lambda n: gumbel_variant(n, vocab_size, use_fp64, device)
        ),
        Route.FUSED_TOP_K_TOP_P: representatives(
            max_rows, lambda n: fused_top_k_top_p_variant(n, vocab_size)
        ),
    }
    if sampler.use_flashinfer:
        batch_sizes[Route.FLASHINFER] = list(range(1, buffers.logits.shape[0] + 1))
    for route, sizes in batch_sizes.items():
        for n in sizes:
            batch = buffers.logits[:n] if route is Route.FLASHINFER else buffers.rows[:n]
            sampler.draw(route, batch, buffers.slots[:n], buffers.positions[:n])
    return {route.value: len(sizes) for route, sizes in batch_sizes.items()}


def _warm_up_matching(rejection_sampler: PluginRejectionSampler,
                      buffers: _Buffers) -> dict[str, int]:
    """One compile variant: the output width is the engine's K + 1; the
    sampler's tokens are int64, the drafts the runner's input ids."""
    accept_matching_drafts(
        buffers.positions[:1], buffers.draft_tokens[:1], buffers.counts[:2],
        rejection_sampler.num_speculative_steps,
    )
    return {"matching_verification": 1}


def _warm_up_rejection(rejection_sampler: PluginRejectionSampler, buffers: _Buffers,
                       draft_logits: torch.Tensor | None, use_fp64: bool,
                       device: torch.device) -> dict[str, int]:
    """The launch plan depends on the number of requests only, so one logit
    (the bonus position) per request reaches every plan."""
    max_num_reqs, vocab_size = buffers.logits.shape
    sizes = representatives(
        max_num_reqs,
        lambda n: rejection_variant(n, vocab_size, use_fp64, device),
    )
    for n in sizes:
        rejection_sampler.draw(
            buffers.logits[:n],
            buffers.draft_tokens[:n],
            buffers.counts[: n + 1],
            buffers.counts[:n],
            buffers.positions[:n],
            draft_logits,
        )
    return {f"rejection_{rejection_sampler.rejection_sample_method}": len(sizes)}


def _warm_up_ngram(runner: Any, buffers: _Buffers) -> dict[str, int]:
    """The scan at one batch size per variant, over the history the drafts
    scan (``NgramProposerGPU.draft``)."""
    speculator, max_num_reqs = runner.speculator, runner.max_num_reqs
    num_sampled = torch.ones(max_num_reqs, dtype=torch.int32, device=runner.device)
    history_len = speculator.req_states.all_token_ids.gpu.shape[1]
    sizes = representatives(
        max_num_reqs, lambda n: ngram_variant(n, history_len, runner.device)
    )
    fill_tokens = runner.req_states.last_sampled_tokens
    for n in sizes:
        speculator.draft(buffers.counts[:n], num_sampled[:n], fill_tokens)
    return {"ngram": len(sizes)}
