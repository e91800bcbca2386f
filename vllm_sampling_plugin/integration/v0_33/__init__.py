"""The vLLM 0.33.x line: the plugin draws the tokens, upstream does the rest.

Same shape as the 0.32 line. vLLM 0.33 keeps ``use_fp64_gumbel``
(ModelConfig, ``--use-fp64-gumbel``), its FlashInfer top-k/top-p path and
``VLLM_USE_FLASHINFER_SAMPLER`` handling, its fused rejection kernel and its
GPU n-gram proposer, so for sampling this line too patches one name:
``vllm.v1.worker.gpu.model_runner.Sampler`` (bound at ``model_runner.py:156``,
built at ``:495`` of the 0.33.0 wheel), with a subclass that changes only the
final draw (sampler.py). What differs from 0.32 is only ``_sample_random``'s
signature (docs/design/vllm-0.32-integration.md, section on 0.33).

The adaptive speculation policy runs over upstream's n-gram proposer as on
0.32, when asked for (``--speculation-policy adaptive``; upstream's fixed k
is the default here until a GPU run measures it): adaptive_policy.py,
``patch_policy_under_upstream_ngram``.
"""

from __future__ import annotations


def apply() -> None:
    from vllm_sampling_plugin.integration.adaptive_policy import (
        patch_policy_under_upstream_ngram,
    )
    from vllm_sampling_plugin.integration.upstream_sampler import patch_runner_sampler
    from vllm_sampling_plugin.integration.v0_33.sampler import PluginSampler

    patch_runner_sampler(PluginSampler)
    patch_policy_under_upstream_ngram()
