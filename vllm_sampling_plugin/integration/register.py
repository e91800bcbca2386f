"""The ``vllm.general_plugins`` entry point.

vLLM calls :func:`register` once in every process that loads plugins: the
front-end (through ``EngineArgs``), each engine core and each worker. With
the fork start method children inherit the patched modules and do not call it
again, so every patch is applied here, eagerly, in whichever process runs
first. Nothing here touches CUDA (that would force spawn on later children).
"""

from __future__ import annotations

import logging

from vllm_sampling_plugin.integration.version import (
    SUPPORTED_RANGE,
    installed_vllm_version,
    vllm_version_supported,
)

logger = logging.getLogger("vllm.vllm_sampling_plugin")

# None: register() has not run in this process; otherwise what it decided.
_state: str | None = None


def register() -> None:
    """Patch vLLM 0.20's V2 runner to use the plugin's components. Idempotent."""
    global _state
    if _state is not None:
        return
    found = installed_vllm_version()
    if not vllm_version_supported(found):
        _state = f"inactive: vLLM {found} is outside the supported range {SUPPORTED_RANGE}"
        logger.error(
            "vllm-sampling-plugin supports vLLM %s but vLLM %s is installed; "
            "the plugin is inactive and vLLM runs unchanged.",
            SUPPORTED_RANGE,
            found,
        )
        return
    _apply_patches()
    _state = "active"
    logger.info(
        "vllm-sampling-plugin active: the V2 model runner uses the plugin's "
        "Sampler, RejectionSampler and n-gram speculator."
    )


def registration_state() -> str | None:
    """``"active"``, ``"inactive: <why>"``, or None if register() never ran."""
    return _state


def _apply_patches() -> None:
    import vllm.engine.arg_utils as arg_utils
    import vllm.v1.worker.gpu.model_runner as model_runner
    from vllm.config import ModelConfig

    from vllm_sampling_plugin import config as cfg
    from vllm_sampling_plugin.integration.engine_args import patch_engine_args
    from vllm_sampling_plugin.integration.rejection_sampler import (
        PluginRejectionSampler,
    )
    from vllm_sampling_plugin.integration.request_limits import patch_request_limits
    from vllm_sampling_plugin.integration.sampler import PluginSampler
    from vllm_sampling_plugin.integration.spec_sampling_fields import (
        patch_spec_decode_validation,
    )
    from vllm_sampling_plugin.integration.speculator import (
        connecting_speculator,
        init_speculator,
    )
    from vllm_sampling_plugin.integration.vllm_config import patch_vllm_config
    from vllm_sampling_plugin.integration.warmup import warming_up_sampling

    patch_engine_args(arg_utils.EngineArgs, arg_utils.AsyncEngineArgs)
    # Class defaults: ModelConfigs built without the front-end wrapper (draft
    # models, tests) still answer with the defaults.
    setattr(ModelConfig, cfg.FP64_ATTR, False)
    setattr(ModelConfig, cfg.FLASHINFER_ATTR, None)
    patch_vllm_config()
    patch_spec_decode_validation()
    patch_request_limits()
    # The runner module binds these names at import; patch them there.
    model_runner.Sampler = PluginSampler
    model_runner.RejectionSampler = PluginRejectionSampler
    model_runner.init_speculator = init_speculator
    runner_cls = model_runner.GPUModelRunner
    runner_cls.__init__ = connecting_speculator(runner_cls.__init__)
    # The profile run compiles every sampling kernel variant before serving.
    runner_cls._dummy_sampler_run = warming_up_sampling(runner_cls._dummy_sampler_run)
