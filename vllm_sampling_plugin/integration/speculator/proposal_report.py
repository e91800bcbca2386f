"""Worker side of the adaptive speculation policy: how many draft tokens the
n-gram proposer found for each request, sent back with the step's output.

The scheduler decides how many draft tokens a request verifies
(integration/speculator/speculation_policy.py), but the proposer runs on the GPU, after
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

On vLLM 0.32 and 0.33, a step that verifies no draft and after which
nothing is proposed still costs upstream's ``sample_tokens`` three eager
launches: it fills the returned drafts with -1, scatters them into
``req_states.draft_tokens`` and gathers them back (0.33.0
``model_runner.py:2324-2338``, 0.32.0 ``:2265-2281``), 0.1-0.3 ms of host
time a step on a small engine (docs/benchmarks.md). The next step
verifies no draft of these requests (the scheduler gave them no
placeholders), so nothing reads what they write: such a step runs
``sample_tokens`` with the runner's speculator out of sight
(:func:`_speculation_hidden`) and records the empty draft list itself.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any

import torch
from vllm.v1.outputs import AsyncModelRunnerOutput, ModelRunnerOutput

from vllm_sampling_plugin.policy import PROPOSE_ATTR, PROPOSED_ATTR


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
        speculator = self.speculator
        reports = getattr(speculator, "reports_proposals", False)
        if reports and not speculator.propose_this_step and _drafts_unused(self):
            input_batch = self.execute_model_state.input_batch
            with _speculation_hidden(self):
                output = sample_tokens(self, *args, **kwargs)
            self.draft_tokens_handler.set_draft_tokens(
                input_batch, speculator.drafts[: input_batch.num_reqs, :0]
            )
            return output
        output = sample_tokens(self, *args, **kwargs)
        if output is None or not reports or not speculator.propose_this_step:
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


def _drafts_unused(runner: Any) -> bool:
    """The step about to be sampled verifies no draft and schedules none
    after it (``num_spec_tokens_to_schedule`` 0, 0.32/0.33), on one rank
    with no upstream feature that reads the drafts of such a step."""
    state = runner.execute_model_state
    return (
        state is not None
        and getattr(state, "num_spec_tokens_to_schedule", None) == 0
        and state.input_batch.num_draft_tokens == 0
        and state.dp_sync_state is None
        and runner.is_last_pp_rank
        and getattr(runner, "pp_handler", None) is None
        and getattr(runner, "pcp_manager", None) is None
        and getattr(runner, "adaptive_verification", None) is None
    )


@contextlib.contextmanager
def _speculation_hidden(runner: Any):
    """Run a step of ``runner`` as an engine without speculation does: no
    proposer call, no draft writes (what ``sample_tokens`` reads to decide)."""
    speculator, steps = runner.speculator, runner.num_speculative_steps
    runner.speculator, runner.num_speculative_steps = None, 0
    try:
        yield
    finally:
        runner.speculator, runner.num_speculative_steps = speculator, steps


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
