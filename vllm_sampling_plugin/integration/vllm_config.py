"""Let the V2 runner accept n-gram speculation, with async scheduling.

vLLM 0.20 refuses ``method="ngram"``/``"ngram_gpu"`` under
``VLLM_USE_V2_MODEL_RUNNER`` (``VllmConfig._validate_v2_model_runner``) and
turns async scheduling off for ``"ngram"`` (``VllmConfig.__post_init__``),
because its V2 runner has no n-gram speculator. The plugin provides one that
runs on the GPU without host synchronisation, so both checks are shown the
method they would accept while they run, and the real method is restored
right after. Nothing else in the config changes.
"""

from __future__ import annotations

import contextlib
import functools
import logging

import vllm.envs as envs
from vllm.config import VllmConfig

logger = logging.getLogger("vllm.vllm_sampling_plugin")

NGRAM_METHODS = ("ngram", "ngram_gpu")
_PATCHED = "_vllm_sampling_plugin_patched"


def patch_vllm_config() -> None:
    if VllmConfig.__dict__.get(_PATCHED, False):
        return
    VllmConfig.__post_init__ = _keeping_async_for_ngram(VllmConfig.__post_init__)
    VllmConfig._validate_v2_model_runner = _accepting_ngram(
        VllmConfig._validate_v2_model_runner
    )
    setattr(VllmConfig, _PATCHED, True)


@contextlib.contextmanager
def _method_shown_as(speculative_config, shown: str):
    real = speculative_config.method
    speculative_config.method = shown
    try:
        yield
    finally:
        speculative_config.method = real


def _v2_ngram(vllm_config: VllmConfig) -> bool:
    spec = vllm_config.speculative_config
    return (
        bool(envs.VLLM_USE_V2_MODEL_RUNNER)
        and spec is not None
        and spec.method in NGRAM_METHODS
    )


def _keeping_async_for_ngram(post_init):
    @functools.wraps(post_init)
    def __post_init__(self: VllmConfig) -> None:
        if not _v2_ngram(self) or self.speculative_config.method != "ngram":
            return post_init(self)
        # "ngram_gpu" is the method 0.20 already allows with async scheduling.
        with _method_shown_as(self.speculative_config, "ngram_gpu"):
            post_init(self)
        logger.info(
            "vllm-sampling-plugin: n-gram speculation runs on the GPU "
            "(async scheduling %s).",
            "on" if self.scheduler_config.async_scheduling else "off",
        )

    return __post_init__


def _accepting_ngram(validate):
    @functools.wraps(validate)
    def _validate_v2_model_runner(self: VllmConfig) -> None:
        if not _v2_ngram(self):
            return validate(self)
        # Every other V2 restriction still applies.
        with _method_shown_as(self.speculative_config, "eagle"):
            validate(self)

    return _validate_v2_model_runner
