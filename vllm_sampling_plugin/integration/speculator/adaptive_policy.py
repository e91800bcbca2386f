"""Install the adaptive speculation policy; the same patches in both
shapes of the speculator seam (seams/speculator.py).

* the V2 runner's ``sample_tokens`` sends the proposal counts with each
  output (proposal_report.py), from whichever n-gram proposer the runner
  builds: the plugin's on 0.20 (ngram_speculator.py), upstream's on 0.32
  and 0.33 (upstream_ngram.py, which the speculator seam patches in), and
  its ``execute_model`` tells the proposer whether to propose at all;
* the scheduler verifies what was proposed and, with async scheduling,
  plans which steps propose (speculation_policy.py);
* the target model's CUDA graph manager adds full one-token decode graphs
  and, where its attention replays any batch, full graphs for decode steps
  of mixed draft lengths (decode_graphs.py);
* ``ModelConfig``'s class default of ``speculation_policy`` is the shape's
  (integration/settings/defaults.py).

Each part acts only where ``is_adaptive`` holds for the engine's config.
"""

from __future__ import annotations


def patch_adaptive_policy(default_policy: str) -> None:
    """Install the policy's patches; ``default_policy`` is what an engine
    naming no ``speculation_policy`` gets in the seam's shape."""
    import vllm.v1.worker.gpu.model_runner as model_runner
    from vllm.config import ModelConfig
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.request import Request
    from vllm.v1.worker.gpu.cudagraph_utils import ModelCudaGraphManager

    from vllm_sampling_plugin import config as cfg
    from vllm_sampling_plugin.integration.speculator import decode_graphs
    from vllm_sampling_plugin.integration.speculator.proposal_report import (
        following_the_plan,
        reporting_proposals,
    )
    from vllm_sampling_plugin.integration.speculator.speculation_policy import patch_scheduler

    # ModelConfigs built without the front-end wrapper (tests, draft models)
    # answer with the default policy.
    setattr(ModelConfig, cfg.SPECULATION_POLICY_ATTR, default_policy)
    runner_cls = model_runner.GPUModelRunner
    runner_cls.sample_tokens = reporting_proposals(runner_cls.sample_tokens)
    runner_cls.execute_model = following_the_plan(runner_cls.execute_model)
    patch_scheduler(Scheduler, AsyncScheduler, Request)
    if decode_graphs.takes_decode_query_lens(ModelCudaGraphManager):
        ModelCudaGraphManager.__init__ = decode_graphs.adding_one_token_decode_query(
            ModelCudaGraphManager.__init__
        )
    else:
        ModelCudaGraphManager._init_candidates = decode_graphs.adding_single_token_decode_graphs(
            ModelCudaGraphManager._init_candidates
        )
    ModelCudaGraphManager.capture = decode_graphs.adding_mixed_decode_graphs(ModelCudaGraphManager.capture)
    if decode_graphs.dispatch_takes_only_the_shape(ModelCudaGraphManager):
        setattr(ModelCudaGraphManager, decode_graphs.MIXED_DECODE_GRAPHS_ATTR, None)
        ModelCudaGraphManager.dispatch = decode_graphs.dispatching_mixed_decode_steps(ModelCudaGraphManager.dispatch)
        runner_cls.execute_model = decode_graphs.noting_decode_steps(runner_cls.execute_model)

