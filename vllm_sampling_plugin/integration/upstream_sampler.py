"""The plugin's token draw inside upstream's V2 Sampler, for every line that
keeps upstream's Sampler and overrides only ``_sample_random`` (0.32, 0.33).

Each such line's ``PluginSampler`` is ``class PluginSampler(PluginDrawMixin,
<that release's Sampler>)`` and its ``_sample_random`` (whose signature is
the release's own) does two things: hand FlashInfer/XPU batches to
``super()._sample_random`` unchanged, and call :meth:`PluginDrawMixin.plugin_draw`
for the rest with a ``mask`` callable that applies upstream's top-k/top-p
mask with that release's arguments. Everything here reads only what both
releases have: ``sampling_states`` (temperature, seeds, top_k, top_p),
``use_fp64_gumbel``, ``use_flashinfer``, ``return_sampling_mask``,
``logprobs_mode`` and ``get_logprobs_dims``.

* No top-k/top-p: the plugin's Gumbel-max kernel.
* top-k/top-p where the returned logits must carry the mask (processed
  logprobs, ``return_sampling_mask``): upstream's mask, then the plugin's
  Gumbel-max kernel.
* other top-k/top-p batches: the plugin's fused top-k/top-p kernel. With
  ``VLLM_USE_FLASHINFER_SAMPLER`` unset that includes the batches upstream
  would give FlashInfer (no greedy row, no explicit seed): the fused kernel
  draws the same law 6x faster there (docs/benchmarks.md), as the 0.20 line
  does. ``VLLM_USE_FLASHINFER_SAMPLER=1`` keeps them FlashInfer's.

Every non-FlashInfer row is drawn with the plugin's (seed, position) noise,
so a seeded request gets the same token whatever route its batch-mates take.
FP64 noise (``use_fp64_gumbel``) is upstream's own murmur3 stream, so
``--use-fp64-gumbel`` gives upstream's tokens. FP32 noise is chosen per
engine (``fp32_stream_for``): upstream's murmur3 stream when the engine
speculates, the plugin's own Philox stream otherwise.

Why speculation needs upstream's FP32 noise: on these lines upstream's
RejectionSampler verifies the drafts, and on a step whose batch carries any
draft it draws *every* row, drafted or not, with upstream's ``gumbel.py``
noise (``rejection_sample`` -> ``_resample_kernel`` -> ``gumbel_block_argmax``,
keyed by the same (seed, position) and not salted for the target). Steps
without drafts come here. If the two draws used different noise, a seeded
request's token would depend on whether some batch-mate had drafts in that
step (seen on an H100: tests/e2e/test_allowed_tokens.py, n-gram on 0.33, two
identical seeded runs differed). With the same noise in both, the row's
token is the same either way.

Why not upstream's FP32 noise on every engine: it costs more GPU time and
buys nothing without speculation. Host side the two streams are the same
launch (one constexpr; measured on the CPU through Triton's binder, 21.8 and
22.0 us a call). Device side, upstream's noise hashes every token and takes
two accurate ``logf`` (libdevice, about 20 instructions each; bit-exactness
rules out ``lg2.approx``) plus a degree-8 series, where the plugin's spends
one 7-round Philox call on four tokens and two hardware ``lg2.approx``:
compiled for sm_90, the Gumbel kernel's tile loop takes 88 SASS
instructions a token against 32 (2.8x), in a kernel that is ALU-bound at
production vocabularies (upstream's own FP32 kernel measured 2.1-2.35x the
plugin's time at B >= 256 on an H100, docs/benchmarks.md). Without
speculation no other draw shares a request's noise, so the faster stream
stays (docs/architecture.md, "FP32 noise on 0.32 and 0.33").
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from vllm import envs
from vllm.config.model import PROCESSED_LOGPROBS_MODES

from vllm_sampling_plugin.ops.gumbel import gumbel_sample
from vllm_sampling_plugin.ops.topk_topp import top_k_top_p_sample

logger = logging.getLogger("vllm.vllm_sampling_plugin")

# The FP64 noise of 0.32's and 0.33's sample/gumbel.py (murmur3_uniform64).
UPSTREAM_FP64_STREAM = "murmur3"
# Their FP32 noise (murmur3_uniform32 and its log1p tail), and the plugin's.
UPSTREAM_FP32_STREAM = "murmur3"
PLUGIN_FP32_STREAM = "philox"


def fp32_stream_for(vllm_config: Any) -> str:
    """The FP32 noise of the plugin's draw on an engine with ``vllm_config``:
    upstream's when it speculates (upstream's RejectionSampler then draws the
    steps with drafts, and a seeded row must get the same token from both
    draws), else the plugin's faster stream (module docstring)."""
    if getattr(vllm_config, "speculative_config", None) is not None:
        return UPSTREAM_FP32_STREAM
    return PLUGIN_FP32_STREAM

# Upstream's top-k/top-p mask, bound to one step's tensors and this release's
# arguments: processed logits in, masked logits out.
MaskFn = Callable[[torch.Tensor], torch.Tensor]


class PluginDrawMixin:
    """Mixed in before upstream's ``Sampler``: adds the draw; of upstream's
    methods it overrides only ``__init__``, to take FlashInfer's batches
    unless the user asked for FlashInfer, and to log both decisions."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Upstream's Sampler takes vllm_config first; the runner passes it by name.
        vllm_config = kwargs["vllm_config"] if "vllm_config" in kwargs else args[0]
        self.fp32_stream = fp32_stream_for(vllm_config)
        # Upstream turned FlashInfer on where the GPU supports it; only an
        # explicit VLLM_USE_FLASHINFER_SAMPLER=1 keeps it (=0 already has it off).
        takes_flashinfer_batches = self.use_flashinfer and not envs.is_set(
            "VLLM_USE_FLASHINFER_SAMPLER"
        )
        if takes_flashinfer_batches:
            self.use_flashinfer = False
            flashinfer_note = (
                "top-k/top-p batches FlashInfer would take are the plugin's fused "
                "kernel's (VLLM_USE_FLASHINFER_SAMPLER=1 keeps them FlashInfer's)"
            )
        elif self.use_flashinfer:
            flashinfer_note = "FlashInfer batches stay upstream's (VLLM_USE_FLASHINFER_SAMPLER=1)"
        else:
            flashinfer_note = "FlashInfer is off; every top-k/top-p batch is the plugin's"
        if self.use_fp64_gumbel:
            noise = "FP64, upstream's murmur3 stream"
        elif self.fp32_stream == UPSTREAM_FP32_STREAM:
            noise = (
                "FP32, upstream's murmur3 stream (speculative decoding: upstream's "
                "RejectionSampler draws the steps with drafts, with the same noise)"
            )
        else:
            noise = "FP32, the plugin's Philox stream (no speculative decoding)"
        logger.info(
            "vllm-sampling-plugin sampler: Gumbel-max noise in %s (upstream's "
            "use_fp64_gumbel); %s.",
            noise,
            flashinfer_note,
        )

    def needs_masked_logits(self, idx_mapping_np: np.ndarray) -> bool:
        """Whether this step returns logits that must show the top-k/top-p mask."""
        if self.return_sampling_mask:
            return True
        return (
            self.logprobs_mode in PROCESSED_LOGPROBS_MODES
            and self.get_logprobs_dims(idx_mapping_np) is not None
        )

    def plugin_draw(
        self,
        processed_logits: torch.Tensor,  # [num_tokens, vocab_size]
        expanded_idx_mapping: torch.Tensor,  # [num_tokens] int64
        idx_mapping_np: np.ndarray,
        pos: torch.Tensor,  # [num_tokens] int64
        top_k: torch.Tensor | None,  # [num_tokens], None: no row uses top-k
        top_p: torch.Tensor | None,  # [num_tokens], None: no row uses top-p
        mask: MaskFn,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``_sample_random``'s result for a batch upstream did not give to
        FlashInfer/XPU: (sampled token ids, the logits to return)."""
        if top_k is None and top_p is None:
            return self.draw_gumbel(processed_logits, expanded_idx_mapping, pos), processed_logits
        if self.needs_masked_logits(idx_mapping_np):
            # Upstream's mask keeps the returned logits what upstream returns.
            masked = mask(processed_logits)
            return self.draw_gumbel(masked, expanded_idx_mapping, pos), masked
        sampled = self.draw_top_k_top_p(processed_logits, expanded_idx_mapping, pos)
        return sampled, processed_logits

    def draw_top_k_top_p(
        self,
        logits: torch.Tensor,  # [num_tokens, vocab_size]
        expanded_idx_mapping: torch.Tensor,  # [num_tokens] int64
        pos: torch.Tensor,  # [num_tokens] int64
    ) -> torch.Tensor:
        """The fused top-k/top-p kernel on the requests' own top-k/top-p."""
        states = self.sampling_states
        return top_k_top_p_sample(
            logits,
            expanded_idx_mapping,
            states.temperature.gpu,
            states.seeds.gpu,
            pos,
            states.top_k.gpu,
            states.top_p.gpu,
            apply_temperature=False,
            use_fp64=self.use_fp64_gumbel,
            fp64_stream=UPSTREAM_FP64_STREAM,
            fp32_stream=self.fp32_stream,
        )

    def draw_gumbel(
        self,
        logits: torch.Tensor,  # [num_tokens, vocab_size]
        expanded_idx_mapping: torch.Tensor,  # [num_tokens] int64
        pos: torch.Tensor,  # [num_tokens] int64
    ) -> torch.Tensor:
        states = self.sampling_states
        return gumbel_sample(
            logits,
            expanded_idx_mapping,
            states.temperature.gpu,
            states.seeds.gpu,
            pos,
            apply_temperature=False,
            use_fp64=self.use_fp64_gumbel,
            fp64_stream=UPSTREAM_FP64_STREAM,
            fp32_stream=self.fp32_stream,
        )


def patch_runner_sampler(sampler_cls: type) -> None:
    """Bind ``sampler_cls`` where the V2 runner looks ``Sampler`` up, and
    warm its kernels up in the runner's dummy sampler run.

    The runner binds the name at import and builds the sampler in
    load_model(); the watermarking sampler subclasses upstream's Sampler
    directly, so watermarked engines keep upstream's draw.
    """
    import vllm.v1.worker.gpu.model_runner as model_runner

    from vllm_sampling_plugin.integration.upstream_warmup import warming_up_plugin_draw

    model_runner.Sampler = sampler_cls
    runner_cls = model_runner.GPUModelRunner
    if not getattr(runner_cls._dummy_sampler_run, "warms_up_plugin_draw", False):
        runner_cls._dummy_sampler_run = warming_up_plugin_draw(runner_cls._dummy_sampler_run)
