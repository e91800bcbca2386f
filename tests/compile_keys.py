"""What Triton keys a compiled binary on, recorded instead of compiling: the
start-up warm-up tests (``tests/integration/warmup/test_warmup.py`` on vLLM 0.20,
``verification/test_verify_step.py`` on 0.32/0.33) put a :class:`Recorder` in
place of every kernel of ``ops/`` (``scripts/kernel_stubs.py``) and compare
the keys the warm-up launched with the keys of engine-like steps."""

from __future__ import annotations

import inspect

import torch


def specialization(value, specialize=True):
    """What Triton keys a binary on for one runtime argument; a tuple's
    elements each count, as Triton flattens them."""
    if isinstance(value, tuple):
        return tuple(specialization(element) for element in value)
    if isinstance(value, torch.Tensor):
        return (value.dtype, value.data_ptr() % 16 == 0)
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int) and specialize:
        return "one" if value == 1 else value % 16 == 0
    return type(value).__name__


class Recorder:
    """Stands in for a Triton kernel: ``kernel[grid](...)`` records a compile key."""

    def __init__(self, name, kernel, keys):
        self.name = name
        self.signature = inspect.signature(kernel.fn)
        self.do_not_specialize = set(getattr(kernel, "do_not_specialize", ()) or ())
        self.keys = keys

    def __getitem__(self, grid):
        return self.launch

    def launch(self, *args, num_warps=4, num_stages=3, **kwargs):
        bound = self.signature.bind(*args, **kwargs)
        key = [self.name, ("num_warps", num_warps), ("num_stages", num_stages)]
        for name, value in bound.arguments.items():
            annotation = self.signature.parameters[name].annotation
            if "constexpr" in str(annotation):
                key.append((name, value))
            else:
                key.append((name, specialization(value, name not in self.do_not_specialize)))
        self.keys.add(tuple(key))
