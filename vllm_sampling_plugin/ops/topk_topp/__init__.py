"""Top-k / top-p sampling in one fused kernel, and FlashInfer's sampler behind a probe."""
from .launcher import DEFAULT_TUNING, TopKTopPTuning, top_k_top_p_sample

__all__ = ["DEFAULT_TUNING", "TopKTopPTuning", "top_k_top_p_sample"]
