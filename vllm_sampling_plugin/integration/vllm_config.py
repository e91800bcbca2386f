"""Let the V2 runner accept n-gram speculation, with async scheduling.

vLLM 0.20 refuses ``method="ngram"``/``"ngram_gpu"`` under
``VLLM_USE_V2_MODEL_RUNNER`` (``VllmConfig._validate_v2_model_runner``) and
turns async scheduling off for ``"ngram"`` (``VllmConfig.__post_init__``),
because its V2 runner has no n-gram speculator. The plugin provides one that
runs on the GPU without host synchronisation, so both checks are shown the
method they would accept while they run, and the real method is restored
right after. Nothing else in the config changes.

vLLM captures CUDA graphs up to 512 tokens unless told otherwise, and an
n-gram verification step runs max_num_seqs x (k + 1) tokens; one warning says
so when steps outgrow the graphs, with the setting that covers them.
"""

from __future__ import annotations

import contextlib
import functools
import logging

import vllm.envs as envs
from vllm.config import CUDAGraphMode, VllmConfig

from vllm_sampling_plugin.integration.speculation_policy import NGRAM_METHODS

logger = logging.getLogger("vllm.vllm_sampling_plugin")

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
        if not _v2_ngram(self):
            return post_init(self)
        # Bad n-gram settings fail here, in the front-end, naming the field.
        from vllm_sampling_plugin.integration.ngram_speculator import ngram_settings

        ngram_settings(self.speculative_config)
        if self.speculative_config.method == "ngram":
            # "ngram_gpu" is the method 0.20 already allows with async scheduling.
            with _method_shown_as(self.speculative_config, "ngram_gpu"):
                post_init(self)
            logger.info(
                "vllm-sampling-plugin: n-gram speculation runs on the GPU "
                "(async scheduling %s).",
                "on" if self.scheduler_config.async_scheduling else "off",
            )
        else:
            post_init(self)
        warn_if_verification_outgrows_graphs(self)

    return __post_init__


def verification_step_tokens(vllm_config: VllmConfig) -> int:
    """The most tokens one n-gram verification step can run."""
    scheduler = vllm_config.scheduler_config
    k = vllm_config.speculative_config.num_speculative_tokens
    return min(scheduler.max_num_seqs * (k + 1), scheduler.max_num_batched_tokens)


def warn_if_verification_outgrows_graphs(vllm_config: VllmConfig) -> None:
    """One warning where verification steps can run past the captured graphs.

    Such steps run without CUDA graphs, and a small model then waits on its
    host: on an H100 (1B model, max_num_seqs 256, k = 3) n-gram speculation
    gave 1.34x over none with vLLM's 512-token graphs and 2.40x with graphs
    up to 1024 tokens (docs/benchmarks.md).
    """
    model = vllm_config.model_config
    compilation = vllm_config.compilation_config
    if model is None or model.enforce_eager or compilation.cudagraph_mode == CUDAGraphMode.NONE:
        return
    needed = verification_step_tokens(vllm_config)
    captured = compilation.max_cudagraph_capture_size or 0
    if needed > captured:
        logger.warning(
            "vllm-sampling-plugin: n-gram verification steps reach %d tokens "
            "(max_num_seqs x (num_speculative_tokens + 1)) but CUDA graphs are "
            "captured up to %d tokens, so larger steps run without graphs; "
            "--max-cudagraph-capture-size %d covers them.",
            needed, captured, needed,
        )


def _accepting_ngram(validate):
    @functools.wraps(validate)
    def _validate_v2_model_runner(self: VllmConfig) -> None:
        if not _v2_ngram(self):
            return validate(self)
        # Every other V2 restriction still applies.
        with _method_shown_as(self.speculative_config, "eagle"):
            validate(self)

    return _validate_v2_model_runner
