"""Gumbel-max sampling: one token per row from ``softmax(logits / temperature)``."""
from .launcher import gumbel_sample
from .plan import TUNING, GumbelTuning

__all__ = ["TUNING", "GumbelTuning", "gumbel_sample"]
