"""Rejection sampling for speculative decoding: one kernel for every mode."""
from .functional import rejection_sample, unconditional_to_conditional_rates
from .launcher import TUNING, RejectionTuning, rejection_sample_packed

__all__ = [
    "TUNING",
    "RejectionTuning",
    "rejection_sample",
    "rejection_sample_packed",
    "unconditional_to_conditional_rates",
]
