"""The settings seam: ``--use-fp64-gumbel`` and ``VLLM_USE_FLASHINFER_SAMPLER``
from EngineArgs into ModelConfig, where the workers read them.

Releases whose ModelConfig has no ``use_fp64_gumbel`` field (0.20, 0.21)
get the plugin's flag and its FlashInfer setting (integration/settings/engine_args.py;
``--speculation-policy`` is the speculator seam's); from 0.22 on both are
upstream's, read by the plugin's sampler as the runner passes them, and
nothing is patched.
"""

from __future__ import annotations

import dataclasses

from vllm_sampling_plugin.integration.common.found import Found
from vllm_sampling_plugin.integration.common import shapes
from vllm_sampling_plugin.integration.common.shapes import ENGINE_ARGS_WRAPPED

NAME = shapes.SETTINGS
# What integration/settings/engine_args.py wraps.
_ENGINE_ARGS_METHODS = ("__init__", "add_cli_args", "from_cli_args", "create_model_config")


def detect() -> Found:
    from vllm.config import ModelConfig
    from vllm.engine.arg_utils import EngineArgs

    if "use_fp64_gumbel" in {field.name for field in dataclasses.fields(ModelConfig)}:
        return Found.off(NAME, "upstream's ModelConfig has use_fp64_gumbel (--use-fp64-gumbel)")
    missing = [name for name in _ENGINE_ARGS_METHODS if name not in EngineArgs.__dict__]
    if missing:
        return Found.off(NAME, f"EngineArgs defines no {missing}")
    return Found.taken(NAME, ENGINE_ARGS_WRAPPED)


def apply(shape: str) -> None:
    import vllm.engine.arg_utils as arg_utils
    from vllm.config import ModelConfig

    from vllm_sampling_plugin import config as cfg
    from vllm_sampling_plugin.integration.settings.defaults import default, defaults
    from vllm_sampling_plugin.integration.settings.engine_args import patch_engine_args

    patch_engine_args(arg_utils.EngineArgs, arg_utils.AsyncEngineArgs, defaults({NAME: shape}))
    # Class defaults: ModelConfigs built without the front-end wrapper (draft
    # models, tests) still answer with the defaults.
    setattr(ModelConfig, cfg.FP64_ATTR, default(cfg.FP64_ATTR, shape))
    setattr(ModelConfig, cfg.FLASHINFER_ATTR, None)
