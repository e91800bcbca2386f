"""Let the V2 runner accept n-gram speculation, with async scheduling.

vLLM 0.20 refuses ``method="ngram"``/``"ngram_gpu"`` under
``VLLM_USE_V2_MODEL_RUNNER`` (``VllmConfig._validate_v2_model_runner``) and
turns async scheduling off for ``"ngram"`` (``VllmConfig.__post_init__``),
because its V2 runner has no n-gram speculator. The plugin provides one that
runs on the GPU without host synchronisation, so both checks are shown the
method they would accept while they run, and the real method is restored
right after (``patch_vllm_config``). Nothing else in the config changes.

vLLM 0.32's V2 runner has that GPU speculator itself and builds it for
``"ngram"`` and ``"ngram_gpu"`` alike (``spec_decode.init_speculator`` asks
``use_ngram()``), yet ``__post_init__`` still turns async scheduling off for
``"ngram"``: every step then waits for its host work, which costs n-gram
speculation on text that does not repeat about 40% (docs/benchmarks.md). ``keep_async_scheduling_for_ngram``
shows ``__post_init__`` the method upstream schedules asynchronously, where
upstream's check is there (0.33 dropped it for the V2 runner).

vLLM captures CUDA graphs up to 512 tokens unless told otherwise, and an
n-gram verification step runs max_num_seqs x (k + 1) tokens; one warning says
so when steps outgrow the graphs, with the setting that covers them.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging

import vllm.envs as envs
from vllm.config import CUDAGraphMode, VllmConfig

from vllm_sampling_plugin.config import NGRAM_METHODS
from vllm_sampling_plugin.integration.common.log_once import log_once

_PATCHED = "_vllm_sampling_plugin_patched"
# The warning with which upstream's __post_init__ turns async scheduling off
# for a speculative method it does not schedule asynchronously (0.20, 0.32);
# one constant of the function, since Python joins the adjacent literals.
_ASYNC_OFF_WARNING = (
    "Async scheduling not supported with %s-based speculative decoding and will be disabled."
)
_SCHEDULED_AS_NGRAM_GPU = (
    "; 'ngram' is scheduled as upstream schedules 'ngram_gpu', the same proposer"
)


def patch_vllm_config() -> None:
    """0.20: the V2 checks accept the plugin's n-gram speculator."""
    if VllmConfig.__dict__.get(_PATCHED, False):
        return
    VllmConfig.__post_init__ = _keeping_async_for_ngram(
        VllmConfig.__post_init__, plugin_proposer=True
    )
    VllmConfig._validate_v2_model_runner = _accepting_ngram(
        VllmConfig._validate_v2_model_runner
    )
    setattr(VllmConfig, _PATCHED, True)


def upstream_turns_async_off_for_ngram() -> bool:
    """Whether upstream's ``__post_init__`` has the check that turns async
    scheduling off for ``"ngram"`` whatever the runner (0.20, 0.32; not 0.33).
    Asked of upstream's own function, beneath the plugin's wrapper."""
    return _ASYNC_OFF_WARNING in inspect.unwrap(VllmConfig.__post_init__).__code__.co_consts


def keep_async_scheduling_for_ngram() -> None:
    """0.32: ``"ngram"`` on the V2 runner is scheduled as upstream schedules
    ``"ngram_gpu"``, the same speculator. Where upstream has no such check
    (0.33), ``VllmConfig`` stays untouched."""
    if VllmConfig.__dict__.get(_PATCHED, False) or not upstream_turns_async_off_for_ngram():
        return
    VllmConfig.__post_init__ = _keeping_async_for_ngram(
        VllmConfig.__post_init__, plugin_proposer=False
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
    return spec is not None and spec.method in NGRAM_METHODS and _runs_v2(vllm_config)


def _runs_v2(vllm_config: VllmConfig) -> bool:
    # 0.32 decides in a property (the environment, then what the V2 runner
    # supports of this config); 0.20 reads the environment alone.
    if isinstance(getattr(type(vllm_config), "use_v2_model_runner", None), property):
        return bool(vllm_config.use_v2_model_runner)
    return bool(envs.VLLM_USE_V2_MODEL_RUNNER)


def _keeping_async_for_ngram(post_init, plugin_proposer: bool):
    @functools.wraps(post_init)
    def __post_init__(self: VllmConfig) -> None:
        if not _v2_ngram(self):
            return post_init(self)
        if plugin_proposer:
            # Bad n-gram settings fail here, in the front-end, naming the field.
            from vllm_sampling_plugin.integration.speculator.ngram_proposer_0_20 import ngram_settings

            ngram_settings(self.speculative_config)
        if self.speculative_config.method == "ngram":
            # "ngram_gpu" is the method upstream already schedules asynchronously.
            with _method_shown_as(self.speculative_config, "ngram_gpu"):
                post_init(self)
            log_once(
                logging.INFO,
                "vllm-sampling-plugin: n-gram speculation runs on the GPU "
                f"(async scheduling {'on' if self.scheduler_config.async_scheduling else 'off'}"
                f"{'' if plugin_proposer else _SCHEDULED_AS_NGRAM_GPU}).",
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
    host: with graphs too small for the verification steps n-gram speculation
    gained little of what larger graphs gave (docs/benchmarks.md).
    """
    model = vllm_config.model_config
    compilation = vllm_config.compilation_config
    if model is None or model.enforce_eager or compilation.cudagraph_mode == CUDAGraphMode.NONE:
        return
    needed = verification_step_tokens(vllm_config)
    captured = compilation.max_cudagraph_capture_size or 0
    if needed > captured:
        log_once(
            logging.WARNING,
            f"vllm-sampling-plugin: n-gram verification steps reach {needed} tokens "
            "(max_num_seqs x (num_speculative_tokens + 1)) but CUDA graphs are "
            f"captured up to {captured} tokens, so larger steps run without graphs; "
            f"--max-cudagraph-capture-size {needed} covers them.",
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
