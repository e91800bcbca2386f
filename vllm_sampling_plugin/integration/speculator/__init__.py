"""The speculator seam: the n-gram proposer and the adaptive speculation
policy around it (adaptive_policy.py).

Two shapes, told apart by what the installed V2 runner offers:

* ``NGRAM_BEFORE_REQUEST_STATE`` (0.20): the runner has no n-gram
  speculator of its own and builds speculators as
  ``init_speculator(vllm_config, device)`` before its request state. The
  plugin adds its GPU proposer (integration/speculator/init_speculator_0_20.py binds it
  afterwards) and verifies the drafts (the rejection seam: n-gram drafts
  carry no draft logits, which upstream's 0.20 ``probabilistic`` path
  asserts on). With it come the V2 validation and async-scheduling checks
  that must accept ``ngram`` (integration/speculator/vllm_config.py).
* ``POLICY_OVER_UPSTREAM_NGRAM`` (0.32, 0.33): upstream's
  ``spec_decode/ngram`` has its own GPU proposer, ``NgramGPUSpeculator(
  vllm_config, device, req_states)``, whose scan leaves each block's best
  match in ``scratch``. The plugin keeps it and its rejection sampler and
  binds a subclass that also counts the drafts it found
  (integration/speculator/upstream_ngram.py), for the policy. Where upstream's config
  still turns async scheduling off for ``"ngram"`` though its V2 runner
  builds the same GPU speculator as for ``"ngram_gpu"`` (0.32), the plugin
  schedules it as ``"ngram_gpu"`` (integration/speculator/vllm_config.py).

* ``POLICY_OVER_UPSTREAM_NGRAM_AND_SUFFIX`` (0.34): the same over n-gram,
  and over upstream's GPU ``SuffixSpeculator`` (``spec_decode/suffix``),
  which counts its real drafts itself (``num_valid``); the policy reads
  them (speculator/upstream_suffix.py). The async scheduler sizes its
  placeholders from ``num_spec_tokens_to_schedule`` alone.

In every shape, the adaptive policy: ``--speculation-policy`` (settings/engine_args.py),
proposal counts reported back with each output, the scheduler verifying only
what was proposed, full decode graphs for one-token batches; its default in
each shape is settings/defaults.py's.
"""

from __future__ import annotations

import importlib.util
import inspect

from vllm_sampling_plugin.integration.common.found import Found
from vllm_sampling_plugin.integration.common import shapes
from vllm_sampling_plugin.integration.common.shapes import (
    NGRAM_BEFORE_REQUEST_STATE,
    POLICY_OVER_UPSTREAM_NGRAM,
    POLICY_OVER_UPSTREAM_NGRAM_AND_SUFFIX,
)

NAME = shapes.SPECULATOR
_INIT_SPECULATOR = ["vllm_config", "device"]
_UPSTREAM_NGRAM = "vllm.v1.worker.gpu.spec_decode.ngram"
_UPSTREAM_SUFFIX = "vllm.v1.worker.gpu.spec_decode.suffix"
# What upstream_suffix.py reads off upstream's SuffixSpeculator, set in its __init__.
_UPSTREAM_SUFFIX_ATTRS = {"num_valid", "drafts"}
_UPSTREAM_NGRAM_INIT = ["vllm_config", "device", "req_states"]
# What upstream_ngram.py's count reads off upstream's proposer, all set in
# its __init__.
_UPSTREAM_NGRAM_ATTRS = {"scratch", "max_model_len", "max_num_reqs", "num_speculative_steps", "req_states"}
# The policy's other seams: the runner steps that report and follow the
# plan, the scheduler methods it wraps, the graph manager it adds candidates to.
_POLICY_HOOKS = (
    ("vllm.v1.worker.gpu.model_runner", "GPUModelRunner", "sample_tokens"),
    ("vllm.v1.worker.gpu.model_runner", "GPUModelRunner", "execute_model"),
    ("vllm.v1.core.sched.async_scheduler", "AsyncScheduler", "_update_after_schedule"),
    ("vllm.v1.core.sched.scheduler", "Scheduler", "update_from_output"),
    ("vllm.v1.core.sched.scheduler", "Scheduler", "update_draft_token_ids"),
    ("vllm.v1.worker.gpu.cudagraph_utils", "ModelCudaGraphManager", "_init_candidates"),
    ("vllm.v1.worker.gpu.cudagraph_utils", "ModelCudaGraphManager", "capture"),
)


def detect(rejection_found: Found) -> Found:
    found = _detect_proposer(rejection_found)
    if not found.is_taken:
        return found
    missing = [f"{cls}.{name}" for module, cls, name in _POLICY_HOOKS if not _has(module, cls, name)]
    if missing:
        return Found.off(NAME, f"the adaptive policy's hooks are missing: {missing}")
    # A step planned without proposal empties the next step's placeholders
    # through the list AsyncScheduler hands every request (and, where the
    # output sizes it, num_spec_tokens_to_schedule): speculation_policy._planning.
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler

    hands_out = set(inspect.unwrap(AsyncScheduler._update_after_schedule).__code__.co_names)
    if not hands_out & {"_spec_token_placeholders", "num_spec_tokens_to_schedule"}:
        return Found.off(NAME, "AsyncScheduler._update_after_schedule hands out placeholders the plugin cannot size")
    # decode_graphs.adding_mixed_decode_graphs asks the target's attention groups.
    from vllm.v1.worker.gpu.cudagraph_utils import ModelCudaGraphManager

    if "attn_groups" not in inspect.signature(ModelCudaGraphManager.capture).parameters:
        return Found.off(NAME, "ModelCudaGraphManager.capture takes no attn_groups")
    return found


def _detect_proposer(rejection_found: Found) -> Found:
    if importlib.util.find_spec(_UPSTREAM_NGRAM) is not None:
        return _detect_upstream_ngram()
    from vllm.v1.worker.gpu import spec_decode

    if not rejection_found.is_taken:
        return Found.off(NAME, "n-gram drafts need the plugin's rejection sampler")
    params = list(inspect.signature(spec_decode.init_speculator).parameters)
    if params != _INIT_SPECULATOR:
        return Found.off(NAME, f"init_speculator{tuple(params)} is not {tuple(_INIT_SPECULATOR)}")
    return Found.taken(NAME, NGRAM_BEFORE_REQUEST_STATE)


def _has(module: str, cls: str, name: str) -> bool:
    return hasattr(getattr(importlib.import_module(module), cls, None), name)


def _detect_upstream_ngram() -> Found:
    from vllm.v1.worker.gpu.spec_decode.ngram import speculator as ngram

    proposer = getattr(ngram, "NgramGPUSpeculator", None)
    if proposer is None:
        return Found.off(NAME, "spec_decode.ngram has no NgramGPUSpeculator")
    params = [p for p in inspect.signature(proposer.__init__).parameters if p != "self"]
    if params != _UPSTREAM_NGRAM_INIT:
        return Found.off(NAME, f"NgramGPUSpeculator{tuple(params)} is not {tuple(_UPSTREAM_NGRAM_INIT)}")
    missing = _UPSTREAM_NGRAM_ATTRS - _init_names(proposer)
    if missing:
        return Found.off(NAME, f"NgramGPUSpeculator keeps no {sorted(missing)} to count its drafts from")
    if _suffix_reports_its_drafts():
        return Found.taken(NAME, POLICY_OVER_UPSTREAM_NGRAM_AND_SUFFIX)
    return Found.taken(NAME, POLICY_OVER_UPSTREAM_NGRAM)


def _suffix_reports_its_drafts() -> bool:
    """Whether upstream has a GPU suffix speculator that counts its drafts."""
    if importlib.util.find_spec(_UPSTREAM_SUFFIX) is None:
        return False
    from vllm.v1.worker.gpu.spec_decode.suffix import speculator as suffix

    proposer = getattr(suffix, "SuffixSpeculator", None)
    return proposer is not None and _UPSTREAM_SUFFIX_ATTRS <= _init_names(proposer)


def _init_names(proposer: type) -> set[str]:
    """The names upstream's ``__init__`` of ``proposer`` sets, read past the
    plugin's reporting subclass where apply() has bound it (detect may run again)."""
    upstream = next(c for c in proposer.__mro__ if c.__module__.split(".")[0] != "vllm_sampling_plugin")
    return set(upstream.__init__.__code__.co_names)


def apply(shape: str) -> None:
    import vllm.engine.arg_utils as arg_utils
    import vllm.v1.worker.gpu.model_runner as model_runner

    from vllm_sampling_plugin import config as cfg
    from vllm_sampling_plugin.integration.speculator.adaptive_policy import patch_adaptive_policy
    from vllm_sampling_plugin.integration.settings.defaults import default, defaults
    from vllm_sampling_plugin.integration.settings.engine_args import patch_engine_args

    if shape == NGRAM_BEFORE_REQUEST_STATE:
        from vllm_sampling_plugin.integration.speculator.init_speculator_0_20 import (
            connecting_speculator,
            init_speculator,
        )
        from vllm_sampling_plugin.integration.speculator.vllm_config import patch_vllm_config

        patch_vllm_config()
        # The runner binds the name at import; patch it there.
        model_runner.init_speculator = init_speculator
        runner_cls = model_runner.GPUModelRunner
        runner_cls.__init__ = connecting_speculator(runner_cls.__init__)
    else:
        from vllm_sampling_plugin.integration.speculator.upstream_ngram import patch_upstream_ngram
        from vllm_sampling_plugin.integration.speculator.vllm_config import (
            keep_async_scheduling_for_ngram,
        )

        patch_upstream_ngram()
        keep_async_scheduling_for_ngram()
        if shape == POLICY_OVER_UPSTREAM_NGRAM_AND_SUFFIX:
            from vllm_sampling_plugin.integration.speculator.upstream_suffix import patch_upstream_suffix

            patch_upstream_suffix()
    patch_engine_args(arg_utils.EngineArgs, arg_utils.AsyncEngineArgs, defaults({NAME: shape}))
    patch_adaptive_policy(default(cfg.SPECULATION_POLICY_ATTR, shape))
