"""Allowed token ids, logit bias and min-tokens stop masking, race-free."""
from .launcher import apply_logit_bias_

__all__ = ["apply_logit_bias_"]
