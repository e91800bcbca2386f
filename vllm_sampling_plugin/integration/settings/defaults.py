"""The plugin's engine settings, which seam's shape adds each, and what an
engine that names none of them gets: the one defaults table.

A setting's default is the plugin's choice in a shape whose engine runs
measured that choice at least at upstream's; its flag opts back out
(the runs: docs/benchmarks.md). The table is keyed by the shapes the seams
detect, never by release. Imports nothing from vLLM, so ``info`` and the
front end read the same answer.
"""

from __future__ import annotations

from collections.abc import Mapping

from vllm_sampling_plugin import config as cfg
from vllm_sampling_plugin.integration.common import shapes

# setting -> (the seam whose shapes add it, {shape: default there}).
DEFAULTS: dict[str, tuple[str, dict[str, object]]] = {
    # Added where upstream's ModelConfig has no field of its own; FP32 draws
    # the same distribution about twice as fast.
    cfg.FP64_ATTR: (shapes.SETTINGS, {shapes.ENGINE_ARGS_WRAPPED: False}),
    # Adaptive never lost to fixed k over either proposer.
    cfg.SPECULATION_POLICY_ATTR: (
        shapes.SPECULATOR,
        {
            shapes.NGRAM_BEFORE_REQUEST_STATE: cfg.ADAPTIVE,
            shapes.POLICY_OVER_UPSTREAM_NGRAM: cfg.ADAPTIVE,
            shapes.POLICY_OVER_UPSTREAM_NGRAM_AND_SUFFIX: cfg.ADAPTIVE,
        },
    ),
    # The fused verification: no mix's median below 0.99x of upstream's.
    # (0.20's shape has no such setting: the plugin verifies every draft.)
    cfg.VERIFICATION_ATTR: (
        shapes.REJECTION,
        {shape: cfg.PLUGIN for shape in shapes.VERIFY_STEPS},
    ),
}


def defaults(seam_shapes: Mapping[str, str | None]) -> dict[str, object]:
    """The settings that the seams taken in ``seam_shapes`` (seam -> shape,
    None: upstream's) add, each with its default there."""
    return {
        setting: by_shape[seam_shapes[seam]]
        for setting, (seam, by_shape) in DEFAULTS.items()
        if seam_shapes.get(seam) in by_shape
    }


def default(setting: str, shape: str) -> object:
    """``setting``'s default where its seam is taken in ``shape``."""
    return DEFAULTS[setting][1][shape]
