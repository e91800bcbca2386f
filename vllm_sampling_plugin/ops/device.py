"""The one fact about the GPU the launch plans need: how many SMs it has."""

from __future__ import annotations

import functools

import torch


@functools.cache
def num_sms(device: torch.device) -> int | None:
    """The streaming-multiprocessor count of a CUDA device; None for CPU
    tensors (the Triton interpreter), where each planner picks its own shape."""
    if device.type != "cuda":
        return None
    return torch.cuda.get_device_properties(device).multi_processor_count
