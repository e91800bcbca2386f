"""Worker side of the adaptive speculation policy: how many draft tokens the
n-gram proposer found for each request, sent back with the step's output.

The scheduler decides how many draft tokens a request verifies
(integration/speculation_policy.py), but the proposer runs on the GPU, after
the step's output copy has been queued (``GPUModelRunner.sample_tokens``:
``AsyncOutput``, then ``postprocess``, then ``propose``). A wrapper around
``sample_tokens`` queues one more device-to-host copy, of the proposer's
``num_proposed(num_reqs)`` (int32, one per request in batch order: the
plugin's NgramProposerGPU on 0.20, upstream's proposer through
upstream_ngram.py on 0.32/0.33), on the
runner's output copy stream behind everything the main stream has queued,
and attaches the counts to the ``ModelRunnerOutput`` when the engine core
collects it. Nothing waits on the GPU earlier than vLLM's own
``get_output`` does, so async scheduling keeps its overlap.

The counts travel as a plain attribute of ``ModelRunnerOutput``
(:data:`PROPOSED_ATTR`), a list of ints aligned with ``req_ids``; the
dataclass keeps it through pickling to the engine core.

Under async scheduling the scheduler also plans, step by step, whether the
runner proposes at all (speculation_policy.py, ``PROPOSE_ATTR`` on the
``SchedulerOutput``). A wrapper around ``execute_model`` hands the plan to
the speculator (``speculator.propose_this_step``); a step without proposal
launches nothing and sends no report, which the scheduler reads as no
drafts found.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from vllm.v1.outputs import AsyncModelRunnerOutput, ModelRunnerOutput

PROPOSED_ATTR = "vllm_sampling_plugin_num_proposed"

# The other direction: set on each SchedulerOutput under async scheduling,
# whether the runner proposes drafts after that step (absent: it does).
PROPOSE_ATTR = "vllm_sampling_plugin_propose"


class OutputWithProposals(AsyncModelRunnerOutput):
    """An ``AsyncOutput`` whose ``get_output`` also delivers the proposal counts."""

    def __init__(
        self,
        output: AsyncModelRunnerOutput,
        snapshot: torch.Tensor,  # [num_reqs] int32, device
        num_proposed: torch.Tensor,  # [num_reqs] int32, host, being copied
        copied: torch.cuda.Event,
    ):
        self.output = output
        # Held until the copy is done: the copy stream reads it.
        self.snapshot = snapshot
        self.num_proposed = num_proposed
        self.copied = copied

    def get_output(self) -> ModelRunnerOutput:
        model_runner_output = self.output.get_output()
        self.copied.synchronize()
        setattr(model_runner_output, PROPOSED_ATTR, self.num_proposed.tolist())
        return model_runner_output

    def get_kv_connector_output(self):
        # Abstract from vLLM 0.33 on (the executor salvages the step's KV
        # output through it when get_output fails); wrapped, not changed.
        return self.output.get_kv_connector_output()

    def __getattr__(self, name: str) -> Any:
        # Anything else vLLM reads from its own async output (e.g.
        # model_runner_output) comes from the wrapped one.
        return getattr(self.__dict__["output"], name)


def reporting_proposals(sample_tokens):
    """Wrap ``GPUModelRunner.sample_tokens`` to send the proposal counts along.

    Active only on runners whose speculator reports them
    (``speculator.num_proposed(num_reqs)``, set up by the n-gram proposer
    under the adaptive policy); every other runner returns vLLM's output
    unchanged. 0.33's ``sample_tokens`` has 0.20's order (``AsyncOutput`` at
    ``model_runner.py:2247``, ``propose`` at ``:2308``) and the same streams.
    """

    @functools.wraps(sample_tokens)
    def wrapper(self, *args: Any, **kwargs: Any):
        output = sample_tokens(self, *args, **kwargs)
        speculator = self.speculator
        if (
            output is None
            or not getattr(speculator, "reports_proposals", False)
            or not speculator.propose_this_step
        ):
            return output
        if isinstance(output, ModelRunnerOutput):
            # Synchronous scheduling: vLLM has already waited for the step.
            counts = speculator.num_proposed(len(output.req_ids))
            setattr(output, PROPOSED_ATTR, counts.tolist())
            return output
        num_reqs = len(output.model_runner_output.req_ids)
        # The next step's proposal overwrites the speculator's buffer on the
        # main stream; the copy stream reads a snapshot taken in order.
        snapshot = speculator.num_proposed(num_reqs).clone()
        main_stream, copy_stream = self.main_stream, self.output_copy_stream
        copied = torch.cuda.Event()
        with torch.cuda.stream(copy_stream):
            copy_stream.wait_stream(main_stream)
            num_proposed = snapshot.to("cpu", non_blocking=True)
            copied.record(copy_stream)
        return OutputWithProposals(output, snapshot, num_proposed, copied)

    return wrapper


def following_the_plan(execute_model):
    """Wrap ``GPUModelRunner.execute_model`` to tell a reporting speculator
    whether to propose after this step (the scheduler's plan; absent under
    synchronous scheduling and in dummy runs: propose)."""

    @functools.wraps(execute_model)
    def wrapper(self, scheduler_output, *args: Any, **kwargs: Any):
        speculator = self.speculator
        if getattr(speculator, "reports_proposals", False):
            speculator.propose_this_step = getattr(scheduler_output, PROPOSE_ATTR, True)
        return execute_model(self, scheduler_output, *args, **kwargs)

    return wrapper
