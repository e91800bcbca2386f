"""Input checks that more than one launcher makes, with one wording."""

import torch
import triton
from triton.runtime.interpreter import InterpretedFunction

from .random import noise_code


@triton.jit
def _decoration_probe():
    pass


# Triton decides at decoration time, from TRITON_INTERPRET, whether a kernel
# runs in its interpreter (on CPU tensors) or is compiled for the GPU; every
# kernel of ``ops`` is decorated when ``ops`` is imported, as this one is.
KERNELS_INTERPRETED = isinstance(_decoration_probe, InterpretedFunction)


def check_kernels_run_on(name: str, device: torch.device) -> None:
    """CPU tensors need kernels made for Triton's interpreter; without this
    check Triton fails deep inside with "0 active drivers"."""
    if device.type == "cpu" and not KERNELS_INTERPRETED:
        raise ValueError(
            f"{name} is on the CPU, but the kernels were compiled for the GPU: pass CUDA "
            "tensors, or set TRITON_INTERPRET=1 in the environment before Python imports "
            "vllm_sampling_plugin.ops to run them on the CPU (slow)"
        )


def check_same_device(device: torch.device, **tensors: torch.Tensor | None) -> None:
    """Every tensor named (None: an optional one left out) is on ``device``,
    the logits' device: a kernel cannot read another device's memory."""
    for name, tensor in tensors.items():
        if tensor is not None and tensor.device != device:
            raise ValueError(f"{name} is on {tensor.device} but logits are on {device}")


def check_fp64_choice(
    use_fp64: object, fp64_stream: object = "philox", fp32_stream: object = "philox"
) -> None:
    """The public ops' ``use_fp64`` is a bool (a string such as "yes" would
    otherwise index the launch tables); ``fp64_stream`` and ``fp32_stream``
    name streams."""
    if not isinstance(use_fp64, bool):
        raise ValueError(f"use_fp64 must be True or False, got {use_fp64!r}")
    # The launchers' own check of the stream names, made before any kernel.
    noise_code(use_fp64, fp64_stream, fp32_stream)
