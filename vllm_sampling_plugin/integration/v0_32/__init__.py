"""The vLLM 0.32.x line: the plugin draws the tokens, upstream does the rest.

vLLM 0.32 already has ``use_fp64_gumbel`` (ModelConfig, ``--use-fp64-gumbel``),
a FlashInfer top-k/top-p path with its own ``VLLM_USE_FLASHINFER_SAMPLER``
handling, a fused rejection kernel and a GPU n-gram proposer. So for
sampling this line patches one name: ``vllm.v1.worker.gpu.model_runner.Sampler``,
with a subclass that changes only the final draw (see sampler.py and
integration/parts.py for why). ModelConfig, VllmConfig, the RejectionSampler,
the speculators' kernels and the watermarking sampler stay upstream's.

The adaptive speculation policy runs over upstream's n-gram proposer when
asked for (``--speculation-policy adaptive``; the default here is upstream's
fixed k until a GPU run measures it, engine_args.default_speculation_policy):
adaptive_policy.py, ``patch_policy_under_upstream_ngram``. EngineArgs learns
the setting, the proposer reports how many drafts it found, the scheduler
verifies those, and one-token decode steps get full CUDA graphs.
"""

from __future__ import annotations


def apply() -> None:
    from vllm_sampling_plugin.integration.adaptive_policy import (
        patch_policy_under_upstream_ngram,
    )
    from vllm_sampling_plugin.integration.upstream_sampler import patch_runner_sampler
    from vllm_sampling_plugin.integration.v0_32.sampler import PluginSampler

    patch_runner_sampler(PluginSampler)
    patch_policy_under_upstream_ngram()
