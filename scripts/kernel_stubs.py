"""The ops' Triton kernels swapped for stand-ins, on an H100's launch plans,
without vLLM: what the start-up warm-up tests record compile keys with
(``tests/compile_keys.py``), on every vLLM line."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from types import ModuleType

import vllm_sampling_plugin.ops as ops_pkg

H100_SMS = 132


def ops_modules() -> list[ModuleType]:
    return [
        importlib.import_module(info.name)
        for info in pkgutil.walk_packages(ops_pkg.__path__, ops_pkg.__name__ + ".")
    ]


def stub_ops(stand_in: Callable[[str, object], object], set_attr=setattr) -> None:
    """Replace every Triton kernel of ``ops/`` (a module's ``*_kernel``) by
    ``stand_in(name, kernel)``, and every SM count by an H100's.
    ``set_attr`` may be pytest's ``monkeypatch.setattr``, which undoes it."""
    for module in ops_modules():
        for name, obj in list(vars(module).items()):
            if name.endswith("_kernel") and hasattr(obj, "fn") and hasattr(obj, "__getitem__"):
                set_attr(module, name, stand_in(name, obj))
            elif "num_sms" in name and callable(obj):
                set_attr(module, name, lambda device: H100_SMS)
