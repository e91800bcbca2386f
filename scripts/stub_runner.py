"""The plugin's vLLM 0.20 runner components on a CPU, without an engine: fake
vLLM request state, and the ops' kernels swapped for stand-ins that run nothing
(``kernel_stubs.py``), on an H100's launch plans. Shared by
``profile_host_path.py`` (host time per step) and
``tests/integration/warmup/test_warmup.py`` (what the warm-up compiles)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch

from vllm_sampling_plugin.integration.speculator.ngram_proposer_0_20 import NgramProposerGPU
from vllm_sampling_plugin.integration.verification.rejection_sampler_0_20 import PluginRejectionSampler
from vllm_sampling_plugin.integration.draw.sample import PluginSampler, PluginSamplingStates


def state(values, dtype):
    """A vLLM state buffer: the host copy and the device tensor."""
    return SimpleNamespace(np=np.array(values), gpu=torch.tensor(values, dtype=dtype))


def fake_sampler(max_num_reqs: int, vocab: int, use_fp64: bool = False) -> PluginSampler:
    """The plugin's sampler over requests with temperature 0.7, top-k 50, top-p 0.9."""
    states = object.__new__(PluginSamplingStates)
    states.vocab_size = vocab
    states.temperature = state([0.7] * max_num_reqs, torch.float32)
    states.seeds = state(list(range(max_num_reqs)), torch.int64)
    states.top_k = state([50] * max_num_reqs, torch.int32)
    states.top_p = state([0.9] * max_num_reqs, torch.float32)
    states.has_explicit_seed = np.zeros(max_num_reqs, dtype=bool)
    states.num_logprobs = np.full(max_num_reqs, -1, dtype=np.int32)
    sampler = object.__new__(PluginSampler)
    sampler.sampling_states = states
    sampler.use_flashinfer = False
    sampler.use_fp64_gumbel = use_fp64
    sampler.logprobs_mode = "raw_logprobs"
    return sampler


def fake_rejection_sampler(sampler: PluginSampler, k: int, method: str) -> PluginRejectionSampler:
    """The plugin's rejection sampler of ``k`` drafts; ``method``: "probabilistic"
    or "synthetic" (conditional rates of 0.5)."""
    rejection = object.__new__(PluginRejectionSampler)
    rejection.sampler = sampler
    rejection.num_speculative_steps = k
    rejection.rejection_sample_method = method
    rejection.synthetic_mode = method == "synthetic"
    rejection.synthetic_conditional_rates = torch.full((k,), 0.5) if rejection.synthetic_mode else None
    return rejection


def fake_ngram_speculator(max_num_reqs: int, k: int, max_model_len: int) -> NgramProposerGPU:
    """The plugin's n-gram speculator (n from 2 to 4) over empty histories."""
    speculator = object.__new__(NgramProposerGPU)
    speculator.min_n, speculator.max_n, speculator.k = 2, 4, k
    speculator.drafts = torch.zeros(max_num_reqs, k, dtype=torch.int64)
    speculator.num_drafts = torch.zeros(max_num_reqs, dtype=torch.int32)
    speculator.scratch = torch.zeros(max_num_reqs, 64, dtype=torch.int64)
    speculator.req_states = SimpleNamespace(
        all_token_ids=SimpleNamespace(
            gpu=torch.zeros(max_num_reqs, max_model_len, dtype=torch.int32)
        ),
        total_len=SimpleNamespace(gpu=torch.zeros(max_num_reqs, dtype=torch.int32)),
        max_model_len=max_model_len,
        last_sampled_tokens=torch.zeros(max_num_reqs, 1, dtype=torch.int64),
    )
    return speculator
