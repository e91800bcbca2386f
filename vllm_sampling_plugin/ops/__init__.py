"""Sampling kernels and their Python launchers.

Plain tensors in, plain tensors out. This package imports ``torch`` and
``triton`` only, never ``vllm``: every op runs on the GPU without vLLM and on
CPU tensors under ``TRITON_INTERPRET=1``.
"""
from vllm_sampling_plugin.ops.ngram import ngram_propose, ngram_propose_into, ngram_scratch  # noqa: F401
from .rejection import rejection_sample, rejection_sample_packed, unconditional_to_conditional_rates  # noqa: F401
from vllm_sampling_plugin.ops.sample import sample  # noqa: F401
