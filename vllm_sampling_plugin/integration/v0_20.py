"""The vLLM 0.20.x line: every part is the plugin's.

vLLM 0.20 has no ``use_fp64_gumbel`` setting and no seeded fused top-k/top-p
path, so the plugin adds the flag (EngineArgs, ModelConfig, VllmConfig checks)
and replaces the V2 runner's Sampler, RejectionSampler and n-gram speculator
at the names ``vllm.v1.worker.gpu.model_runner`` binds at import. The
Sampler also brings the race-free allowed-ids / logit-bias / min-tokens step
(``logit_bias.py``), which speculative verification runs through it.
"""

from __future__ import annotations


def apply() -> None:
    import vllm.engine.arg_utils as arg_utils
    import vllm.v1.worker.gpu.model_runner as model_runner
    from vllm.config import ModelConfig

    from vllm_sampling_plugin import config as cfg
    from vllm_sampling_plugin.integration.adaptive_policy import patch_adaptive_policy
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
    # The adaptive speculation policy: proposal counts go back with each
    # output, the scheduler verifies what was proposed, steps without drafts
    # replay full decode graphs, and ModelConfig's default policy is set.
    patch_adaptive_policy()
