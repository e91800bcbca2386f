"""The rejection seam: who verifies speculative drafts.

The plugin's RejectionSampler (integration/verification/rejection_sampler_0_20.py) implements
0.20's methods (``strict``, ``probabilistic``, ``synthetic``) and verifies
n-gram drafts by matching the plugin sampler's own draws, so it needs the
draw seam in the ``sample()`` shape and a RejectionSampler built as
``(sampler, spec_config, device)``. From 0.21 on upstream's methods are
``standard``/``synthetic`` (then ``block``, ``fly``), with adaptive
verification and watermark keys the plugin's kernel does not handle.

* ``STRICT_PROBABILISTIC_SYNTHETIC`` (0.20): the plugin's RejectionSampler
  replaces upstream's.
* ``VERIFY_STEP_OVER_UPSTREAM`` (0.32, 0.33): upstream's RejectionSampler is
  built as ``(sampler, spec_config, device, *, watermark_key)`` and verifies
  in ``_verify_in_chunks`` -> ``_verify(logits, draft_logits, draft_sampled,
  pos, cu_num_logits, idx_mapping, idx_mapping_np, expanded_idx_mapping,
  expanded_local_pos, seq_lens_upper_bound_np, verify_draft_sampled)``, which
  builds the float32 canvas (``Sampler.apply_sampling_params``) and runs the
  method's kernels. The seam binds integration/verification/verify_step.py's
  subclass, which overrides only those two methods, and only on engines
  whose ``plugin_verification`` is ``plugin`` (the default in this
  shape: integration/settings/defaults.py): on the others its constructor returns
  upstream's own RejectionSampler. It also teaches EngineArgs the setting.
* ``VERIFY_STEP_OVER_DRAFT_LOGITS_CACHE`` (0.34): the same step, with draft
  logits in a ``DraftLogitsCache``, no ``verify_draft_sampled``,
  ``logprobs_dims`` and trace replay of verified tokens;
  verification/verify_step_draft_logits_cache.py adapts the subclass.
* 0.21-0.31: rejection stays upstream's (other methods or signatures).
"""

from __future__ import annotations

import inspect
import typing

from vllm_sampling_plugin.integration.common.found import Found
from vllm_sampling_plugin.integration.common import shapes
from vllm_sampling_plugin.integration.common.shapes import (
    SAMPLE,
    STRICT_PROBABILISTIC_SYNTHETIC,
    VERIFY_STEP_OVER_DRAFT_LOGITS_CACHE,
    VERIFY_STEP_OVER_UPSTREAM,
)

NAME = shapes.REJECTION
_PLUGIN_METHODS = {"strict", "probabilistic", "synthetic"}
_CONSTRUCTOR = ["sampler", "spec_config", "device"]
# 0.32/0.33's shape: what the subclass overrides and calls.
_UPSTREAM_CONSTRUCTOR = ["sampler", "spec_config", "device", "watermark_key"]
_UPSTREAM_VERIFY = [
    "logits",
    "draft_logits",
    "draft_sampled",
    "pos",
    "cu_num_logits",
    "idx_mapping",
    "idx_mapping_np",
    "expanded_idx_mapping",
    "expanded_local_pos",
    "seq_lens_upper_bound_np",
    "verify_draft_sampled",
]
_UPSTREAM_VERIFY_IN_CHUNKS = [
    "logits",
    "input_batch",
    "draft_logits",
    "draft_sampled",
    "pos",
    "max_chunk_logits",
    "max_num_logprobs",
    "verify_draft_sampled",
]
_UPSTREAM_CALL = ["logits", "input_batch", "draft_logits", "invalid_drafts"]
# 0.34's: draft logits in a DraftLogitsCache, no invalid drafts, logprobs_dims.
_CACHE_VERIFY = _UPSTREAM_VERIFY[:-1]
_CACHE_VERIFY_IN_CHUNKS = [*_UPSTREAM_VERIFY_IN_CHUNKS[:-2], "logprobs_dims"]
_CACHE_CALL = _UPSTREAM_CALL[:-1]
_SIGNATURES = {
    VERIFY_STEP_OVER_UPSTREAM: (_UPSTREAM_CALL, _UPSTREAM_VERIFY, _UPSTREAM_VERIFY_IN_CHUNKS),
    VERIFY_STEP_OVER_DRAFT_LOGITS_CACHE: (_CACHE_CALL, _CACHE_VERIFY, _CACHE_VERIFY_IN_CHUNKS),
}
# What the subclass reads off upstream's Sampler and SamplingStates.
_SAMPLER_ATTRS = ("logits_processors", "thinking_budget_state", "needs_logits_processing")


def detect(draw_found: Found) -> Found:
    import vllm.config.speculative as speculative
    from vllm.v1.worker.gpu.spec_decode.rejection_sampler import RejectionSampler

    methods = set(typing.get_args(getattr(speculative, "RejectionSampleMethod", None)))
    if "standard" in methods:
        return _detect_verify_step(RejectionSampler)
    if methods != _PLUGIN_METHODS:
        return Found.off(NAME, f"upstream's rejection methods are {sorted(methods)}, not {sorted(_PLUGIN_METHODS)}")
    if draw_found.shape != SAMPLE:
        return Found.off(NAME, "matching verification needs the plugin's sample() draw")
    params = [p for p in inspect.signature(RejectionSampler.__init__).parameters if p != "self"]
    if params != _CONSTRUCTOR:
        return Found.off(NAME, f"RejectionSampler{tuple(params)} is not {tuple(_CONSTRUCTOR)}")
    return Found.taken(NAME, STRICT_PROBABILISTIC_SYNTHETIC)


def _parameters(fn) -> list[str]:
    return [p for p in inspect.signature(fn).parameters if p != "self"]


def _detect_verify_step(rejection_sampler: type) -> Found:
    """0.32-0.34's shape: upstream's verify step, overridable by a subclass;
    which of its two contracts the signatures tell."""
    from vllm.v1.worker.gpu.sample.sampler import Sampler
    from vllm.v1.worker.gpu.sample.states import SamplingStates

    params = _parameters(rejection_sampler.__init__)
    if params != _UPSTREAM_CONSTRUCTOR:
        return Found.off(NAME, f"RejectionSampler.__init__{tuple(params)} is not {tuple(_UPSTREAM_CONSTRUCTOR)}")
    shape = _verify_contract(rejection_sampler)
    if isinstance(shape, Found):
        return shape
    init_names = set(Sampler.__init__.__code__.co_names)
    missing = [name for name in _SAMPLER_ATTRS if name not in init_names]
    if missing or not hasattr(Sampler, "add_request"):
        return Found.off(NAME, f"upstream's Sampler keeps no {missing or 'add_request'}")
    states = set(SamplingStates.__init__.__code__.co_names)
    missing = [name for name in ("temperature", "top_k", "top_p", "min_p", "seeds") if name not in states]
    if missing:
        return Found.off(NAME, f"SamplingStates keeps no {missing}")
    if shape == VERIFY_STEP_OVER_DRAFT_LOGITS_CACHE:
        from vllm.v1.worker.gpu.spec_decode import draft_logits

        if not {"values", "row_mapping"} <= set(draft_logits.DraftLogitsCache.__init__.__code__.co_names):
            return Found.off(NAME, "DraftLogitsCache keeps no values / row_mapping")
    return Found.taken(NAME, shape)


def _verify_contract(rejection_sampler: type) -> str | Found:
    """The shape whose ``__call__``, ``_verify`` and ``_verify_in_chunks``
    signatures upstream's class has, or why none."""
    call = _parameters(rejection_sampler.__call__)
    for shape, (call_params, verify, in_chunks) in _SIGNATURES.items():
        if call != call_params:
            continue
        for name, expected in (("_verify", verify), ("_verify_in_chunks", in_chunks)):
            method = getattr(rejection_sampler, name, None)
            if method is None:
                return Found.off(NAME, f"RejectionSampler has no {name}")
            params = _parameters(method)
            if params != expected:
                return Found.off(NAME, f"RejectionSampler.{name}{tuple(params)} is not {tuple(expected)}")
        return shape
    return Found.off(NAME, f"RejectionSampler.__call__{tuple(call)} is in no shape the plugin knows")


def apply(shape: str) -> None:
    import vllm.v1.worker.gpu.model_runner as model_runner

    if shape in _SIGNATURES:
        _apply_verify_step(model_runner, shape)
        return

    from vllm_sampling_plugin.integration.verification.rejection_sampler_0_20 import PluginRejectionSampler
    from vllm_sampling_plugin.integration.verification.spec_sampling_fields_0_20 import (
        patch_spec_decode_validation,
    )

    # The runner binds the name at import; patch it there.
    model_runner.RejectionSampler = PluginRejectionSampler
    # The plugin verifies every draft on processed logits: min_p and
    # logit_bias are exact with speculation.
    patch_spec_decode_validation()


def _apply_verify_step(model_runner, shape: str) -> None:
    import vllm.engine.arg_utils as arg_utils
    from vllm.config import ModelConfig

    from vllm_sampling_plugin import config as cfg
    from vllm_sampling_plugin.integration.settings.defaults import default, defaults
    from vllm_sampling_plugin.integration.settings.engine_args import patch_engine_args

    if shape == VERIFY_STEP_OVER_DRAFT_LOGITS_CACHE:
        from vllm_sampling_plugin.integration.verification.verify_step_draft_logits_cache import (
            PluginVerifyingDraftCacheRejectionSampler as verifier,
        )
    else:
        from vllm_sampling_plugin.integration.verification.verify_step import (
            PluginVerifyingRejectionSampler as verifier,
        )

    patch_engine_args(arg_utils.EngineArgs, arg_utils.AsyncEngineArgs, defaults({NAME: shape}))
    # ModelConfigs built without the front-end wrapper answer the shape's default.
    setattr(ModelConfig, cfg.VERIFICATION_ATTR, default(cfg.VERIFICATION_ATTR, shape))
    # The runner binds the name at import; its constructor hands back
    # upstream's RejectionSampler where the setting is upstream's.
    model_runner.RejectionSampler = verifier
