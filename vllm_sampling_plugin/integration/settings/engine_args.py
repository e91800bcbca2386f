"""Teach ``EngineArgs`` the plugin's ``use_fp64_gumbel``,
``speculation_policy`` and ``plugin_verification`` and carry the settings into ``ModelConfig``.

vLLM gives plugins no way to add an engine argument, so four methods are
wrapped (each wrapper calls the original and adds one thing):

* ``EngineArgs.__init__`` and ``AsyncEngineArgs.__init__`` (each dataclass has
  its own generated ``__init__``) accept the plugin's keywords and store them
  as plain attributes, so ``EngineArgs(...)`` and ``LLM(...)`` take them;
* ``EngineArgs.add_cli_args`` (a staticmethod, also reached from
  ``AsyncEngineArgs.add_cli_args``) adds ``--use-fp64-gumbel`` /
  ``--no-use-fp64-gumbel`` to the ModelConfig group and
  ``--speculation-policy`` and ``--plugin-verification`` to the
  SpeculativeConfig group;
* ``EngineArgs.from_cli_args`` copies the parsed flags, which it would
  otherwise drop because they are not dataclass fields;
* ``EngineArgs.create_model_config`` stores the resolved settings on the
  ModelConfig it builds (see :mod:`vllm_sampling_plugin.config`).

Each seam that needs a keyword asks for it (:func:`patch_engine_args`): the
settings seam for ``use_fp64_gumbel`` (and the FlashInfer setting it carries),
the speculator seam for ``speculation_policy``, the rejection seam for
``plugin_verification`` (0.32, 0.33); integration/settings/early.py asks
for those of the line's seams before any ``EngineArgs(...)``. Only keywords
the installed ``EngineArgs`` lacks are added (:func:`plugin_keywords`): 0.22
and later have their own ``use_fp64_gumbel`` field, flag and ModelConfig
setting, which stay upstream's. A keyword is taught once; a later request
for it does nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
from collections.abc import Iterable, Mapping

from vllm_sampling_plugin import config as cfg

_PATCHED = "_vllm_sampling_plugin_patched"
FP64_FLAG = "--use-fp64-gumbel"
POLICY_FLAG = "--speculation-policy"
VERIFICATION_FLAG = "--plugin-verification"


def plugin_keywords(engine_args_cls: type, wanted: Iterable[str]) -> tuple[str, ...]:
    """The plugin's settings among ``wanted`` that ``engine_args_cls`` has no field for."""
    fields = {f.name for f in dataclasses.fields(engine_args_cls)}
    return tuple(name for name in wanted if name not in fields)


def patch_engine_args(
    engine_args_cls: type,
    async_engine_args_cls: type,
    defaults: Mapping[str, object],
) -> None:
    """Teach ``EngineArgs``/``AsyncEngineArgs`` the settings in ``defaults``
    (setting -> its default: integration/settings/defaults.py) that they
    lack and have not been taught yet; idempotent."""
    taught = engine_args_cls.__dict__.get(_PATCHED, ())
    keywords = tuple(k for k in plugin_keywords(engine_args_cls, defaults) if k not in taught)
    if not keywords:
        return
    for attr in keywords:
        setattr(engine_args_cls, attr, defaults[attr])
    for cls in (engine_args_cls, async_engine_args_cls):
        cls.__init__ = _accepting_plugin_keywords(cls.__dict__["__init__"], keywords, defaults)
    engine_args_cls.add_cli_args = staticmethod(_adding_plugin_flags(
        engine_args_cls.__dict__["add_cli_args"].__func__, keywords, defaults))
    engine_args_cls.from_cli_args = classmethod(_carrying_plugin_flags(
        engine_args_cls.__dict__["from_cli_args"].__func__, keywords, defaults))
    engine_args_cls.create_model_config = _storing_settings(
        engine_args_cls.__dict__["create_model_config"], keywords
    )
    setattr(engine_args_cls, _PATCHED, taught + keywords)


def _accepting_plugin_keywords(init, keywords: tuple[str, ...], defaults: Mapping[str, object]):
    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        # Set before the original __init__, whose __post_init__ may look at them.
        if cfg.FP64_ATTR in keywords:
            use_fp64_gumbel = kwargs.pop(cfg.FP64_ATTR, defaults[cfg.FP64_ATTR])
            if not isinstance(use_fp64_gumbel, bool):
                raise TypeError(
                    f"use_fp64_gumbel must be a bool, got {type(use_fp64_gumbel).__name__}"
                )
            self.use_fp64_gumbel = use_fp64_gumbel
        if cfg.SPECULATION_POLICY_ATTR in keywords:
            self.speculation_policy = cfg.check_speculation_policy(
                kwargs.pop(cfg.SPECULATION_POLICY_ATTR, defaults[cfg.SPECULATION_POLICY_ATTR])
            )
        if cfg.VERIFICATION_ATTR in keywords:
            self.plugin_verification = cfg.check_verification(
                kwargs.pop(cfg.VERIFICATION_ATTR, defaults[cfg.VERIFICATION_ATTR])
            )
        init(self, *args, **kwargs)

    return __init__


def _adding_plugin_flags(add_cli_args, keywords: tuple[str, ...], defaults: Mapping[str, object]):
    @functools.wraps(add_cli_args)
    def wrapper(parser):
        parser = add_cli_args(parser)
        flags = {flag for action in parser._actions for flag in action.option_strings}
        group = next(
            (g for g in parser._action_groups if g.title == "ModelConfig"), parser
        )
        if cfg.FP64_ATTR in keywords and FP64_FLAG not in flags:
            group.add_argument(
                FP64_FLAG,
                dest="use_fp64_gumbel",
                action=argparse.BooleanOptionalAction,
                default=defaults[cfg.FP64_ATTR],
                help=cfg.FP64_HELP,
            )
        spec_group = next(
            (g for g in parser._action_groups if g.title == "SpeculativeConfig"),
            group,
        )
        if cfg.SPECULATION_POLICY_ATTR in keywords and POLICY_FLAG not in flags:
            spec_group.add_argument(
                POLICY_FLAG,
                dest="speculation_policy",
                choices=cfg.SPECULATION_POLICIES,
                default=defaults[cfg.SPECULATION_POLICY_ATTR],
                help=f"{cfg.SPECULATION_POLICY_HELP} Default here: "
                f"{defaults[cfg.SPECULATION_POLICY_ATTR]!r}.",
            )
        if cfg.VERIFICATION_ATTR in keywords and VERIFICATION_FLAG not in flags:
            spec_group.add_argument(
                VERIFICATION_FLAG,
                dest="plugin_verification",
                choices=cfg.VERIFICATIONS,
                default=defaults[cfg.VERIFICATION_ATTR],
                help=f"{cfg.VERIFICATION_HELP} Default here: {defaults[cfg.VERIFICATION_ATTR]!r}.",
            )
        return parser

    return wrapper


def _carrying_plugin_flags(from_cli_args, keywords: tuple[str, ...], defaults: Mapping[str, object]):
    @functools.wraps(from_cli_args)
    def wrapper(cls, args: argparse.Namespace):
        engine_args = from_cli_args(cls, args)
        if cfg.FP64_ATTR in keywords:
            engine_args.use_fp64_gumbel = bool(getattr(args, "use_fp64_gumbel", defaults[cfg.FP64_ATTR]))
        if cfg.SPECULATION_POLICY_ATTR in keywords:
            engine_args.speculation_policy = cfg.check_speculation_policy(
                getattr(args, "speculation_policy", defaults[cfg.SPECULATION_POLICY_ATTR])
            )
        if cfg.VERIFICATION_ATTR in keywords:
            engine_args.plugin_verification = cfg.check_verification(
                getattr(args, "plugin_verification", defaults[cfg.VERIFICATION_ATTR])
            )
        return engine_args

    return wrapper


def _storing_settings(create_model_config, keywords: tuple[str, ...]):
    @functools.wraps(create_model_config)
    def wrapper(self, *args, **kwargs):
        model_config = create_model_config(self, *args, **kwargs)
        if cfg.FP64_ATTR in keywords:
            # The sampler settings are the plugin's only where upstream has
            # no use_fp64_gumbel (0.20, 0.21); later lines keep both upstream's.
            setattr(model_config, cfg.FP64_ATTR, bool(self.use_fp64_gumbel))
            setattr(model_config, cfg.FLASHINFER_ATTR, cfg.parse_flashinfer_env())
        if cfg.SPECULATION_POLICY_ATTR in keywords:
            setattr(model_config, cfg.SPECULATION_POLICY_ATTR, self.speculation_policy)
        if cfg.VERIFICATION_ATTR in keywords:
            setattr(
                model_config,
                cfg.VERIFICATION_ATTR,
                cfg.check_verification(self.plugin_verification),
            )
        return model_config

    return wrapper
