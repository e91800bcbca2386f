"""The speculator seam: the GPU n-gram proposer and the adaptive speculation
policy around it.

Taken where the V2 runner has no n-gram speculator of its own (through
0.31; 0.32 brings ``spec_decode/ngram``), builds speculators as
``init_speculator(vllm_config, device)`` before its request state (0.20's
order: integration/speculator.py binds the proposer afterwards), and the
plugin verifies the drafts (the rejection seam: n-gram drafts carry no
draft logits, which upstream's 0.20 ``probabilistic`` path asserts on).
With it come the V2 validation and async-scheduling checks that must accept
``ngram`` (integration/vllm_config.py) and the adaptive policy: proposal
counts reported back with each output, the scheduler verifying only what
was proposed, full decode graphs for one-token batches.
"""

from __future__ import annotations

import importlib.util
import inspect

from vllm_sampling_plugin.integration.seams.found import Found
from vllm_sampling_plugin.integration.seams import shapes
from vllm_sampling_plugin.integration.seams.shapes import NGRAM_BEFORE_REQUEST_STATE

NAME = shapes.SPECULATOR
_INIT_SPECULATOR = ["vllm_config", "device"]


def detect(rejection_found: Found) -> Found:
    from vllm.v1.worker.gpu import spec_decode

    if importlib.util.find_spec("vllm.v1.worker.gpu.spec_decode.ngram") is not None:
        return Found.off(NAME, "upstream's V2 runner has its own n-gram speculator")
    if not rejection_found.is_taken:
        return Found.off(NAME, "n-gram drafts need the plugin's rejection sampler")
    params = list(inspect.signature(spec_decode.init_speculator).parameters)
    if params != _INIT_SPECULATOR:
        return Found.off(NAME, f"init_speculator{tuple(params)} is not {tuple(_INIT_SPECULATOR)}")
    return Found.taken(NAME, NGRAM_BEFORE_REQUEST_STATE)


def apply(shape: str) -> None:
    import vllm.v1.worker.gpu.model_runner as model_runner
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.request import Request
    from vllm.v1.worker.gpu.cudagraph_utils import ModelCudaGraphManager

    from vllm_sampling_plugin.integration.decode_graphs import (
        adding_single_token_decode_graphs,
    )
    from vllm_sampling_plugin.integration.proposal_report import reporting_proposals
    from vllm_sampling_plugin.integration.speculation_policy import patch_scheduler
    from vllm_sampling_plugin.integration.speculator import (
        connecting_speculator,
        init_speculator,
    )
    from vllm_sampling_plugin.integration.vllm_config import patch_vllm_config

    patch_vllm_config()
    # The runner binds the name at import; patch it there.
    model_runner.init_speculator = init_speculator
    runner_cls = model_runner.GPUModelRunner
    runner_cls.__init__ = connecting_speculator(runner_cls.__init__)
    # The adaptive speculation policy: proposal counts go back with each
    # output, the scheduler verifies what was proposed, and steps without
    # drafts replay full decode graphs.
    runner_cls.sample_tokens = reporting_proposals(runner_cls.sample_tokens)
    patch_scheduler(Scheduler, Request)
    ModelCudaGraphManager._init_candidates = adding_single_token_decode_graphs(
        ModelCudaGraphManager._init_candidates
    )
