"""Input checks that more than one launcher makes, with one wording."""

import torch


def check_same_device(device: torch.device, **tensors: torch.Tensor | None) -> None:
    """Every tensor named (None: an optional one left out) is on ``device``,
    the logits' device: a kernel cannot read another device's memory."""
    for name, tensor in tensors.items():
        if tensor is not None and tensor.device != device:
            raise ValueError(f"{name} is on {tensor.device} but logits are on {device}")
