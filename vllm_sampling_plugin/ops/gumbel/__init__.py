"""Gumbel-max sampling: one token per row from ``softmax(logits / temperature)``."""
from .launcher import TUNING, GumbelTuning, gumbel_sample

__all__ = ["TUNING", "GumbelTuning", "gumbel_sample"]
