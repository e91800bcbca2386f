"""The vLLM 0.32.x line: the plugin draws the tokens, upstream does the rest.

vLLM 0.32 already has ``use_fp64_gumbel`` (ModelConfig, ``--use-fp64-gumbel``),
a FlashInfer top-k/top-p path with its own ``VLLM_USE_FLASHINFER_SAMPLER``
handling, a fused rejection kernel and a GPU n-gram proposer. So this line
patches one name: ``vllm.v1.worker.gpu.model_runner.Sampler``, with a subclass
that changes only the final draw (see sampler.py and
integration/parts.py for why). EngineArgs, ModelConfig, VllmConfig, the
RejectionSampler, the speculators and the watermarking sampler stay upstream's.
"""

from __future__ import annotations


def apply() -> None:
    from vllm_sampling_plugin.integration.upstream_sampler import patch_runner_sampler
    from vllm_sampling_plugin.integration.v0_32.sampler import PluginSampler

    patch_runner_sampler(PluginSampler)
