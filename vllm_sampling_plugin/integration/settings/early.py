"""Make ``EngineArgs`` accept the plugin's keywords before anyone can pass them.

``LLM(model=..., speculation_policy="fixed")`` hands its keywords to
``EngineArgs(...)``, whose generated ``__init__`` rejects unknown keywords
before ``__post_init__`` loads the general plugins. The keywords are the
settings (settings/defaults.py) of the shapes ``LINE_SEAMS`` records for the
installed line (the seams themselves are detected later, in ``register()``,
which vLLM's config import must not wait for). The only hook vLLM runs earlier is
platform-plugin discovery, which happens on the first use of
``vllm.platforms.current_platform`` while ``vllm.config`` is imported. This
module is registered as a ``vllm.platform_plugins`` entry point for that reason
alone: it always answers "not my platform" (returns None).

At that moment ``vllm.engine.arg_utils`` is in one of three states, and each
gets the patch as soon as the classes exist:

* already imported: patched now;
* being imported (it imports ``vllm.config`` near its top): the module's own
  ``dataclass`` name is rebound to a wrapper that patches ``AsyncEngineArgs``
  and ``EngineArgs`` right after they are created, then puts the original back;
* not imported yet: a meta-path finder patches it right after it executes.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import logging
import functools
import sys
from types import ModuleType

from vllm_sampling_plugin.integration.settings.defaults import defaults
from vllm_sampling_plugin.integration.settings.engine_args import patch_engine_args
from vllm_sampling_plugin.integration.version import (
    LINE_SEAMS,
    installed_vllm_version,
    release_line,
)

logger = logging.getLogger("vllm.vllm_sampling_plugin")

ARG_UTILS = "vllm.engine.arg_utils"


def teach_engine_args() -> None:
    """``vllm.platform_plugins`` entry point; returns None (no platform)."""
    try:
        # A measured line's shapes are known before register() detects them;
        # on a newer release each seam teaches its keywords as register()
        # applies it, and on an older one the plugin stays inactive.
        line = release_line(installed_vllm_version())
        settings = defaults(LINE_SEAMS.get(line, {}))
        if settings:
            when_arg_utils_ready(functools.partial(patch_engine_args, defaults=settings))
    except Exception:  # vLLM swallows platform-plugin errors; say why here.
        logger.exception("vllm-sampling-plugin could not patch EngineArgs early")
    return None


def when_arg_utils_ready(patch) -> None:
    """Call ``patch(EngineArgs, AsyncEngineArgs)`` as soon as both exist."""
    module = sys.modules.get(ARG_UTILS)
    if module is None:
        if not any(isinstance(f, _PatchAfterImport) for f in sys.meta_path):
            sys.meta_path.insert(0, _PatchAfterImport(patch))
    elif getattr(module.__spec__, "_initializing", False):
        _patch_when_classes_defined(module, patch)
    else:
        patch(module.EngineArgs, module.AsyncEngineArgs)


def _patch_when_classes_defined(module: ModuleType, patch) -> None:
    original = module.__dict__["dataclass"]

    def dataclass(cls=None, /, **kwargs):
        if cls is None:
            return lambda c: dataclass(c, **kwargs)
        cls = original(cls, **kwargs)
        # AsyncEngineArgs is the later of the two; the decorator runs before
        # the module binds its name, so it is passed on directly.
        if cls.__name__ == "AsyncEngineArgs":
            module.__dict__["dataclass"] = original
            patch(module.EngineArgs, cls)
        return cls

    module.__dict__["dataclass"] = dataclass


class _PatchAfterImport(importlib.abc.MetaPathFinder):
    """Runs ``patch`` on ``vllm.engine.arg_utils`` once it has executed."""

    def __init__(self, patch):
        self._patch = patch

    def find_spec(self, fullname, path, target=None):
        if fullname != ARG_UTILS:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        exec_module = spec.loader.exec_module
        patch = self._patch

        def exec_then_patch(module):
            exec_module(module)
            patch(module.EngineArgs, module.AsyncEngineArgs)

        spec.loader.exec_module = exec_then_patch
        return spec
