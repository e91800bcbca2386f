"""Build the n-gram speculator for the V2 runner and connect speculators to
the plugin's sampler.

``init_speculator`` is looked up in ``vllm.v1.worker.gpu.model_runner``; the
plugin's version builds :class:`NgramProposerGPU` for ``ngram``/``ngram_gpu``
and defers to vLLM for everything else. Two things can only happen once the
runner is built, so a wrapper around ``GPUModelRunner.__init__`` does them:

* the runner creates the speculator before its ``RequestState``, so the n-gram
  speculator is bound to the request state afterwards;
* EAGLE drafts with vLLM's FP64 ``gumbel_sample``. In ``strict`` mode its
  drafts are accepted when they equal the target's sample, which happens most
  often when both draw the same noise, so the EAGLE module is pointed at the
  plugin's kernel in the sampler's precision.
"""

from __future__ import annotations

import functools

import torch
from vllm.config import VllmConfig
from vllm.v1.worker.gpu.spec_decode import init_speculator as vllm_init_speculator

from vllm_sampling_plugin.ops.gumbel import gumbel_sample

from vllm_sampling_plugin.integration.speculator.ngram_proposer_0_20 import NgramProposerGPU
from vllm_sampling_plugin.config import NGRAM_METHODS


def init_speculator(vllm_config: VllmConfig, device: torch.device):
    if vllm_config.speculative_config.method in NGRAM_METHODS:
        return NgramProposerGPU(vllm_config, device)
    return vllm_init_speculator(vllm_config, device)


def connecting_speculator(runner_init):
    """Wrap ``GPUModelRunner.__init__`` to connect its speculator."""

    @functools.wraps(runner_init)
    def __init__(self, *args, **kwargs):
        runner_init(self, *args, **kwargs)
        if isinstance(self.speculator, NgramProposerGPU):
            self.speculator.bind(self.req_states)
        elif self.speculator is not None and hasattr(self.sampler, "use_fp64_gumbel"):
            from vllm.v1.worker.gpu.spec_decode.eagle import speculator as eagle

            eagle.gumbel_sample = functools.partial(
                gumbel_sample, use_fp64=self.sampler.use_fp64_gumbel
            )

    return __init__
