"""Sampling kernels and their Python launchers.

Plain tensors in, plain tensors out. This package imports ``torch`` and
``triton`` only, never ``vllm``: every op runs on the GPU without vLLM and on
CPU tensors under ``TRITON_INTERPRET=1``. One subpackage per capability
(``gumbel``, ``topk_topp``, ``rejection``, ``ngram``, ``logit_bias``);
``random`` and ``masking`` are what they share; ``sample`` is the public
sampling API.
"""
from .logit_bias import apply_logit_bias_
from .ngram import ngram_propose, ngram_propose_into, ngram_scratch
from .rejection import rejection_sample, rejection_sample_packed, unconditional_to_conditional_rates
from .sample import sample

__all__ = [
    "apply_logit_bias_",
    "ngram_propose",
    "ngram_propose_into",
    "ngram_scratch",
    "rejection_sample",
    "rejection_sample_packed",
    "sample",
    "unconditional_to_conditional_rates",
]
