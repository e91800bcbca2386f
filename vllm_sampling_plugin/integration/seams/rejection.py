"""The rejection seam: who verifies speculative drafts.

The plugin's RejectionSampler (integration/rejection_sampler.py) implements
0.20's methods (``strict``, ``probabilistic``, ``synthetic``) and verifies
n-gram drafts by matching the plugin sampler's own draws, so it needs the
draw seam in the ``sample()`` shape and a RejectionSampler built as
``(sampler, spec_config, device)``. From 0.21 on upstream's methods are
``standard``/``synthetic`` (then ``block``, ``fly``), with adaptive
verification and watermark keys the plugin's kernel does not handle: there
rejection stays upstream's.
"""

from __future__ import annotations

import inspect
import typing

from vllm_sampling_plugin.integration.seams.found import Found
from vllm_sampling_plugin.integration.seams import shapes
from vllm_sampling_plugin.integration.seams.shapes import SAMPLE, STRICT_PROBABILISTIC_SYNTHETIC

NAME = shapes.REJECTION
_PLUGIN_METHODS = {"strict", "probabilistic", "synthetic"}
_CONSTRUCTOR = ["sampler", "spec_config", "device"]


def detect(draw_found: Found) -> Found:
    import vllm.config.speculative as speculative
    from vllm.v1.worker.gpu.spec_decode.rejection_sampler import RejectionSampler

    methods = set(typing.get_args(getattr(speculative, "RejectionSampleMethod", None)))
    if methods != _PLUGIN_METHODS:
        return Found.off(NAME, f"upstream's rejection methods are {sorted(methods)}, not {sorted(_PLUGIN_METHODS)}")
    if draw_found.shape != SAMPLE:
        return Found.off(NAME, "matching verification needs the plugin's sample() draw")
    params = [p for p in inspect.signature(RejectionSampler.__init__).parameters if p != "self"]
    if params != _CONSTRUCTOR:
        return Found.off(NAME, f"RejectionSampler{tuple(params)} is not {tuple(_CONSTRUCTOR)}")
    return Found.taken(NAME, STRICT_PROBABILISTIC_SYNTHETIC)


def apply(shape: str) -> None:
    import vllm.v1.worker.gpu.model_runner as model_runner

    from vllm_sampling_plugin.integration.rejection_sampler import PluginRejectionSampler
    from vllm_sampling_plugin.integration.spec_sampling_fields import (
        patch_spec_decode_validation,
    )

    # The runner binds the name at import; patch it there.
    model_runner.RejectionSampler = PluginRejectionSampler
    # The plugin verifies every draft on processed logits: min_p and
    # logit_bias are exact with speculation.
    patch_spec_decode_validation()
