"""Teach ``EngineArgs`` the plugin's ``use_fp64_gumbel`` and carry the settings
into ``ModelConfig``.

vLLM 0.20 gives plugins no way to add an engine argument, so four methods are
wrapped (each wrapper calls the original and adds one thing):

* ``EngineArgs.__init__`` and ``AsyncEngineArgs.__init__`` (each dataclass has
  its own generated ``__init__``) accept ``use_fp64_gumbel=`` and store it as a
  plain attribute, so ``EngineArgs(...)`` and ``LLM(...)`` take the keyword;
* ``EngineArgs.add_cli_args`` (a staticmethod, also reached from
  ``AsyncEngineArgs.add_cli_args``) adds ``--use-fp64-gumbel`` /
  ``--no-use-fp64-gumbel`` to the ModelConfig group;
* ``EngineArgs.from_cli_args`` copies the parsed flag, which it would
  otherwise drop because it is not a dataclass field;
* ``EngineArgs.create_model_config`` stores the resolved settings on the
  ModelConfig it builds (see :mod:`vllm_sampling_plugin.config`).
"""

from __future__ import annotations

import argparse
import functools
from vllm_sampling_plugin import config as cfg

_PATCHED = "_vllm_sampling_plugin_patched"
FP64_FLAG = "--use-fp64-gumbel"


def patch_engine_args(engine_args_cls: type, async_engine_args_cls: type) -> None:
    """Apply the wrappers to ``EngineArgs``/``AsyncEngineArgs``; idempotent."""
    if engine_args_cls.__dict__.get(_PATCHED, False):
        return
    engine_args_cls.use_fp64_gumbel = False
    for cls in (engine_args_cls, async_engine_args_cls):
        cls.__init__ = _accepting_fp64_keyword(cls.__dict__["__init__"])
    engine_args_cls.add_cli_args = staticmethod(
        _adding_fp64_flag(engine_args_cls.__dict__["add_cli_args"].__func__)
    )
    engine_args_cls.from_cli_args = classmethod(
        _carrying_fp64_flag(engine_args_cls.__dict__["from_cli_args"].__func__)
    )
    engine_args_cls.create_model_config = _storing_settings(
        engine_args_cls.__dict__["create_model_config"]
    )
    setattr(engine_args_cls, _PATCHED, True)


def _accepting_fp64_keyword(init):
    @functools.wraps(init)
    def __init__(self, *args, use_fp64_gumbel: bool = False, **kwargs):
        if not isinstance(use_fp64_gumbel, bool):
            raise TypeError(
                f"use_fp64_gumbel must be a bool, got {type(use_fp64_gumbel).__name__}"
            )
        # Set before the original __init__, whose __post_init__ may look at it.
        self.use_fp64_gumbel = use_fp64_gumbel
        init(self, *args, **kwargs)

    return __init__


def _adding_fp64_flag(add_cli_args):
    @functools.wraps(add_cli_args)
    def wrapper(parser):
        parser = add_cli_args(parser)
        if any(FP64_FLAG in action.option_strings for action in parser._actions):
            return parser
        group = next(
            (g for g in parser._action_groups if g.title == "ModelConfig"), parser
        )
        group.add_argument(
            FP64_FLAG,
            dest="use_fp64_gumbel",
            action=argparse.BooleanOptionalAction,
            default=False,
            help=cfg.FP64_HELP,
        )
        return parser

    return wrapper


def _carrying_fp64_flag(from_cli_args):
    @functools.wraps(from_cli_args)
    def wrapper(cls, args: argparse.Namespace):
        engine_args = from_cli_args(cls, args)
        engine_args.use_fp64_gumbel = bool(getattr(args, "use_fp64_gumbel", False))
        return engine_args

    return wrapper


def _storing_settings(create_model_config):
    @functools.wraps(create_model_config)
    def wrapper(self, *args, **kwargs):
        model_config = create_model_config(self, *args, **kwargs)
        setattr(model_config, cfg.FP64_ATTR, bool(self.use_fp64_gumbel))
        setattr(model_config, cfg.FLASHINFER_ATTR, cfg.parse_flashinfer_env())
        return model_config

    return wrapper
