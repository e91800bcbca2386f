"""The draw seam: which kernel turns a step's processed logits into tokens.

vLLM's V2 Sampler has drawn its tokens in three shapes so far; the adapter
(:func:`detect`) tells them apart by what the installed Sampler offers, not
by the version number:

* ``SAMPLE`` (0.20-0.22): ``Sampler.sample`` applies every sampling
  parameter, top-k/top-p included (``SamplingStates.apply_top_k_top_p``),
  then draws with ``gumbel_sample``. No FlashInfer in the V2 runner. The
  plugin's sampler (integration/sampler.py) replaces ``sample``.
* ``SAMPLE_SKIPPING_TOP_K_TOP_P`` (0.23-0.29): ``sample`` applies the
  parameters with ``skip_top_k_top_p=True``, decides whether FlashInfer may
  take the batch, then masks and draws inline. The plugin's ``sample`` keeps
  those steps and hands the draw to the same method the next shape uses.
* ``SAMPLE_RANDOM`` (0.30 on): ``sample`` calls
  ``_sample_random(processed_logits, expanded_idx_mapping, idx_mapping_np,
  pos, top_k, top_p, *mask_args, use_fused)``; only that is overridden.
  Arguments between ``top_p`` and the flag (0.33's ``has_topp_only_rows``)
  go to upstream's ``apply_top_k_top_p`` by name.

In the last two shapes every batch upstream does not give to FlashInfer/XPU
(and, with ``VLLM_USE_FLASHINFER_SAMPLER`` unset, those too: selection.py)
is drawn by :meth:`PluginDrawMixin.plugin_draw`:

* no top-k/top-p: the plugin's Gumbel-max kernel;
* top-k/top-p where the returned logits must carry the mask (processed
  logprobs, a sampling mask): upstream's mask, then the Gumbel-max kernel;
* other top-k/top-p batches: the plugin's fused top-k/top-p kernel, seeded
  per (seed, position) and batch-invariant.

Precision is upstream's ``use_fp64_gumbel`` (a constructor argument since
0.22); FP64 draws the noise stream upstream's ``sample/gumbel.py`` draws
(Philox through 0.30, murmur3 from 0.31); FP32 draws upstream's murmur3
stream on engines that speculate where the plugin has upstream's FP32 noise
(0.31 on), the plugin's faster Philox stream otherwise (noise.py says why
and what each release draws).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import vllm.v1.worker.gpu.sample.sampler as upstream
from vllm.v1.worker.gpu.sample.states import SamplingStates

from vllm_sampling_plugin.integration.common.found import Found
from vllm_sampling_plugin.integration.common import shapes
from vllm_sampling_plugin.integration.seams.noise import (
    PLUGIN_FP32_STREAM,
    fp32_noise,
    upstream_sampler_instead,
    upstream_fp64_stream,
)
from vllm_sampling_plugin.integration.common.shapes import (
    SAMPLE,
    SAMPLE_SKIPPING_TOP_K_TOP_P,
    SAMPLE_RANDOM,
)
from vllm_sampling_plugin.ops.gumbel import gumbel_sample
from vllm_sampling_plugin.ops.topk_topp import top_k_top_p_sample
from vllm_sampling_plugin.selection import takes_flashinfer_batches

logger = logging.getLogger("vllm.vllm_sampling_plugin")

NAME = shapes.DRAW


# The logprobs modes whose returned logits are the processed (masked) ones.
_PROCESSED_MODES = ("processed_logprobs", "processed_logits")

# _sample_random's leading parameters, the same in every release that has it.
_DRAW_INPUTS = ("processed_logits", "expanded_idx_mapping", "idx_mapping_np", "pos", "top_k", "top_p")
# The parameter saying upstream gives the batch to FlashInfer (0.30) or
# FlashInfer/XPU (0.31 on).
_FUSED_FLAGS = ("use_flashinfer", "use_fused_sampler")
# sample()'s trailing parameters in the SAMPLE_SKIPPING_TOP_K_TOP_P shape;
# the plugin's sample() reads idx_mapping_np and pos by their place from the end.
_SKIPPING_SAMPLE_TAIL = ("idx_mapping_np", "pos", "input_ids", "expanded_local_pos", "return_logprobs")

# Upstream's top-k/top-p mask bound to one step: processed logits in, masked out.
MaskFn = Callable[[torch.Tensor], torch.Tensor]


def _parameters(fn) -> list[str]:
    return [name for name in inspect.signature(fn).parameters if name != "self"]


def detect() -> Found:
    """The installed Sampler's draw shape, or why the plugin cannot take it."""
    sampler = upstream.Sampler
    sample_params = _parameters(sampler.sample)
    sample_random = getattr(sampler, "_sample_random", None)
    if sample_random is not None:
        params = _parameters(sample_random)
        mask_args = params[len(_DRAW_INPUTS) : -1]
        mask_params = _parameters(upstream.apply_top_k_top_p)
        if tuple(params[: len(_DRAW_INPUTS)]) != _DRAW_INPUTS or params[-1] not in _FUSED_FLAGS:
            return Found.off(NAME, f"Sampler._sample_random{tuple(params)} is not a known signature")
        if not set(mask_args) <= set(mask_params):
            return Found.off(NAME, f"apply_top_k_top_p takes no {sorted(set(mask_args) - set(mask_params))}")
        if not hasattr(sampler, "get_logprobs_dims"):
            return Found.off(NAME, "Sampler has no get_logprobs_dims (whether logits are returned)")
        return Found.taken(NAME, SAMPLE_RANDOM)
    if "skip_top_k_top_p" in _parameters(sampler.apply_sampling_params):
        needed = ("get_top_k_top_p", "any_greedy", "any_explicit_seed")
        missing = [name for name in needed if not hasattr(SamplingStates, name)]
        if tuple(sample_params[-len(_SKIPPING_SAMPLE_TAIL) :]) != _SKIPPING_SAMPLE_TAIL:
            return Found.off(NAME, f"Sampler.sample{tuple(sample_params)} is not a known signature")
        if missing or not hasattr(upstream, "flashinfer_sample"):
            return Found.off(NAME, f"SamplingStates lacks {missing or 'flashinfer_sample'}")
        return Found.taken(NAME, SAMPLE_SKIPPING_TOP_K_TOP_P)
    from vllm_sampling_plugin.integration import sampler as whole_sample

    expected = _parameters(whole_sample.PluginSampler.sample)
    if sample_params != expected:
        return Found.off(NAME, f"Sampler.sample{tuple(sample_params)} is not {tuple(expected)}")
    if not hasattr(SamplingStates, "apply_top_k_top_p"):
        return Found.off(NAME, "SamplingStates has no apply_top_k_top_p to defer")
    return Found.taken(NAME, SAMPLE)


def sampler_class(shape: str) -> type:
    """The plugin's Sampler for a draw shape."""
    if shape == SAMPLE:
        from vllm_sampling_plugin.integration import sampler

        return sampler.PluginSampler
    return PluginInlineDrawSampler if shape == SAMPLE_SKIPPING_TOP_K_TOP_P else PluginSampler


def apply(shape: str) -> None:
    """Bind the plugin's Sampler where the V2 runner looks ``Sampler`` up
    (it binds the name at import and builds the sampler in load_model();
    the watermarking sampler subclasses upstream's directly and keeps its draw)."""
    import vllm.v1.worker.gpu.model_runner as model_runner

    if shape == SAMPLE:
        from vllm_sampling_plugin.integration.request_limits import patch_request_limits

        # This Sampler's per-request tables: over-long requests get a 400 in
        # the front-end instead of failing every request in the worker.
        patch_request_limits()
    model_runner.Sampler = sampler_class(shape)


def _engine_config(args: tuple, kwargs: dict) -> Any:
    """The engine's VllmConfig: upstream's Sampler takes it first from 0.31
    (the runner passes it by name); before, the one being built is current."""
    from vllm.config import get_current_vllm_config_or_none

    config = kwargs.get("vllm_config", args[0] if args else None)
    if hasattr(config, "speculative_config"):
        return config
    return get_current_vllm_config_or_none()


class PluginDrawMixin:
    """Mixed in before upstream's ``Sampler``: adds the draw; of upstream's
    methods it overrides only ``__init__``, to take FlashInfer's batches
    unless the user asked for FlashInfer, to pick the FP32 noise stream
    (noise.py), and to log those decisions."""

    fp32_stream = PLUGIN_FP32_STREAM

    def __new__(cls, *args, **kwargs):
        # An engine whose seeded draws only upstream's noise keeps
        # reproducible stays upstream's (noise.py).
        sampler = upstream_sampler_instead(upstream.Sampler, _engine_config(args, kwargs), args, kwargs)
        return sampler if sampler is not None else super().__new__(cls)

    def __init__(self, *args, **kwargs):
        from vllm import envs

        super().__init__(*args, **kwargs)
        vllm_config = _engine_config(args, kwargs)
        self.fp64_stream = upstream_fp64_stream()
        self.fp32_stream, fp32_note = fp32_noise(vllm_config)
        self.use_flashinfer, flashinfer_note = takes_flashinfer_batches(
            self.use_flashinfer, envs.is_set("VLLM_USE_FLASHINFER_SAMPLER")
        )
        logger.info(
            "vllm-sampling-plugin sampler: Gumbel-max noise in %s (upstream's "
            "use_fp64_gumbel); %s.",
            f"FP64, upstream's {self.fp64_stream} stream"
            if self.use_fp64_gumbel
            else fp32_note,
            flashinfer_note,
        )

    def needs_masked_logits(self, idx_mapping_np: np.ndarray) -> bool:
        """Whether this step returns logits that must show the top-k/top-p mask."""
        if getattr(self, "return_sampling_mask", False):
            return True
        return (
            self.logprobs_mode in _PROCESSED_MODES
            and self.get_logprobs_dims(idx_mapping_np) is not None
        )

    def plugin_draw(
        self,
        processed_logits: torch.Tensor,  # [num_tokens, vocab_size]
        expanded_idx_mapping: torch.Tensor,  # [num_tokens] int64
        pos: torch.Tensor,  # [num_tokens] int64
        top_k: torch.Tensor | None,  # [num_tokens], None: no row uses top-k
        top_p: torch.Tensor | None,  # [num_tokens], None: no row uses top-p
        masked_logits_returned: bool,
        mask: MaskFn,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(sampled token ids, the logits to return) for a batch upstream did
        not give to FlashInfer/XPU."""
        if top_k is None and top_p is None:
            return self.draw_gumbel(processed_logits, expanded_idx_mapping, pos), processed_logits
        if masked_logits_returned:
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
            **self.noise_options(),
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
            **self.noise_options(),
        )

    def noise_options(self) -> dict[str, Any]:
        """The draw's precision and noise streams, as the ops take them."""
        return {
            "use_fp64": self.use_fp64_gumbel,
            "fp64_stream": self.fp64_stream,
            "fp32_stream": self.fp32_stream,
        }


class PluginSampler(PluginDrawMixin, upstream.Sampler):
    """The SAMPLE_RANDOM shape: only ``_sample_random`` is overridden."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # The arguments upstream passes between top_p and its fused flag,
        # which its mask takes by these names.
        self.mask_names = tuple(
            _parameters(upstream.Sampler._sample_random)[len(_DRAW_INPUTS) : -1]
        )

    def _sample_random(
        self,
        processed_logits: torch.Tensor,  # [num_tokens, vocab_size]
        expanded_idx_mapping: torch.Tensor,  # [num_tokens]
        idx_mapping_np: np.ndarray,
        pos: torch.Tensor,  # [num_tokens] int64
        top_k: torch.Tensor | None,
        top_p: torch.Tensor | None,
        *mask_args_and_fused,  # the mask_names' values, then upstream's fused flag
    ) -> tuple[torch.Tensor, torch.Tensor]:
        *mask_args, fused = mask_args_and_fused
        if fused:
            return super()._sample_random(
                processed_logits,
                expanded_idx_mapping,
                idx_mapping_np,
                pos,
                top_k,
                top_p,
                *mask_args_and_fused,
            )
        return self.plugin_draw(
            processed_logits,
            expanded_idx_mapping,
            pos,
            top_k,
            top_p,
            self.needs_masked_logits(idx_mapping_np),
            mask=lambda logits: upstream.apply_top_k_top_p(
                logits, top_k, top_p, **dict(zip(self.mask_names, mask_args))
            ),
        )


class PluginInlineDrawSampler(PluginDrawMixin, upstream.Sampler):
    """The SAMPLE_SKIPPING_TOP_K_TOP_P shape, where upstream draws inline in
    ``sample``: upstream's steps up to its FlashInfer decision, then the
    plugin's draw for every batch FlashInfer does not take."""

    def sample(
        self,
        logits: torch.Tensor,  # [num_tokens, vocab_size]
        expanded_idx_mapping: torch.Tensor,  # [num_tokens]
        *step_inputs,  # upstream's, ending in idx_mapping_np, pos, input_ids, expanded_local_pos
        return_logprobs: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        idx_mapping_np, pos = step_inputs[-4], step_inputs[-3]
        processed_logits = self.apply_sampling_params(
            logits, expanded_idx_mapping, *step_inputs, skip_top_k_top_p=True
        )
        states = self.sampling_states
        top_k, top_p = states.get_top_k_top_p(expanded_idx_mapping, idx_mapping_np)
        processed_returned = return_logprobs and self.logprobs_mode in _PROCESSED_MODES
        # Upstream's rule for FlashInfer (sample/sampler.py of these releases).
        if (
            self.use_flashinfer
            and not (top_k is None and top_p is None)
            and not processed_returned
            and not states.any_greedy(idx_mapping_np)
            and not states.any_explicit_seed(idx_mapping_np)
        ):
            sampled = upstream.flashinfer_sample(processed_logits, top_k, top_p)
            return sampled.to(torch.int64), processed_logits
        return self.plugin_draw(
            processed_logits,
            expanded_idx_mapping,
            pos,
            top_k,
            top_p,
            processed_returned or getattr(self, "return_sampling_mask", False),
            mask=lambda logits: upstream.apply_top_k_top_p(logits, top_k, top_p),
        )
