"""The draw seam: which kernel turns a step's processed logits into tokens.

vLLM's V2 Sampler has drawn its tokens in three shapes so far; the adapter
(:func:`detect`) tells them apart by what the installed Sampler offers, not
by the version number:

* ``SAMPLE`` (0.20-0.22): ``Sampler.sample`` applies every sampling
  parameter, top-k/top-p included (``SamplingStates.apply_top_k_top_p``),
  then draws with ``gumbel_sample``. No FlashInfer in the V2 runner. The
  plugin's sampler (integration/draw/sample.py) replaces ``sample``.
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

import vllm.v1.worker.gpu.sample.sampler as upstream
from vllm.v1.worker.gpu.sample.states import SamplingStates

from vllm_sampling_plugin.integration.common import shapes
from vllm_sampling_plugin.integration.common.found import Found
from vllm_sampling_plugin.integration.common.shapes import (
    SAMPLE,
    SAMPLE_SKIPPING_TOP_K_TOP_P,
    SAMPLE_RANDOM,
)
from vllm_sampling_plugin.integration.draw.sample_random import (
    DRAW_INPUTS,
    PluginRandomDrawSampler,
    parameters,
)
from vllm_sampling_plugin.integration.draw.sample_skipping_top_k_top_p import PluginInlineDrawSampler

NAME = shapes.DRAW

# The parameter saying upstream gives the batch to FlashInfer (0.30) or
# FlashInfer/XPU (0.31 on).
_FUSED_FLAGS = ("use_flashinfer", "use_fused_sampler")
# sample()'s trailing parameters in the SAMPLE_SKIPPING_TOP_K_TOP_P shape;
# the plugin's sample() reads idx_mapping_np and pos by their place from the end.
_SKIPPING_SAMPLE_TAIL = ("idx_mapping_np", "pos", "input_ids", "expanded_local_pos", "return_logprobs")


def detect() -> Found:
    """The installed Sampler's draw shape, or why the plugin cannot take it."""
    sampler = upstream.Sampler
    sample_params = parameters(sampler.sample)
    sample_random = getattr(sampler, "_sample_random", None)
    if sample_random is not None:
        params = parameters(sample_random)
        mask_args = params[len(DRAW_INPUTS) : -1]
        mask_params = parameters(upstream.apply_top_k_top_p)
        if tuple(params[: len(DRAW_INPUTS)]) != DRAW_INPUTS or params[-1] not in _FUSED_FLAGS:
            return Found.off(NAME, f"Sampler._sample_random{tuple(params)} is not a known signature")
        if not set(mask_args) <= set(mask_params):
            return Found.off(NAME, f"apply_top_k_top_p takes no {sorted(set(mask_args) - set(mask_params))}")
        if not hasattr(sampler, "get_logprobs_dims"):
            return Found.off(NAME, "Sampler has no get_logprobs_dims (whether logits are returned)")
        return Found.taken(NAME, SAMPLE_RANDOM)
    if "skip_top_k_top_p" in parameters(sampler.apply_sampling_params):
        needed = ("get_top_k_top_p", "any_greedy", "any_explicit_seed")
        missing = [name for name in needed if not hasattr(SamplingStates, name)]
        if tuple(sample_params[-len(_SKIPPING_SAMPLE_TAIL) :]) != _SKIPPING_SAMPLE_TAIL:
            return Found.off(NAME, f"Sampler.sample{tuple(sample_params)} is not a known signature")
        if missing or not hasattr(upstream, "flashinfer_sample"):
            return Found.off(NAME, f"SamplingStates lacks {missing or 'flashinfer_sample'}")
        return Found.taken(NAME, SAMPLE_SKIPPING_TOP_K_TOP_P)
    from vllm_sampling_plugin.integration.draw.sample import PluginSampler

    expected = parameters(PluginSampler.sample)
    if sample_params != expected:
        return Found.off(NAME, f"Sampler.sample{tuple(sample_params)} is not {tuple(expected)}")
    if not hasattr(SamplingStates, "apply_top_k_top_p"):
        return Found.off(NAME, "SamplingStates has no apply_top_k_top_p to defer")
    return Found.taken(NAME, SAMPLE)


def sampler_class(shape: str) -> type:
    """The plugin's Sampler for a draw shape."""
    if shape == SAMPLE:
        from vllm_sampling_plugin.integration.draw.sample import PluginSampler

        return PluginSampler
    return PluginInlineDrawSampler if shape == SAMPLE_SKIPPING_TOP_K_TOP_P else PluginRandomDrawSampler


def apply(shape: str) -> None:
    """Bind the plugin's Sampler where the V2 runner looks ``Sampler`` up
    (it binds the name at import and builds the sampler in load_model();
    the watermarking sampler subclasses upstream's directly and keeps its draw)."""
    import vllm.v1.worker.gpu.model_runner as model_runner

    if shape == SAMPLE:
        from vllm_sampling_plugin.integration.draw.sample_request_limits import patch_request_limits

        # This Sampler's per-request tables: over-long requests get a 400 in
        # the front-end instead of failing every request in the worker.
        patch_request_limits()
    model_runner.Sampler = sampler_class(shape)
