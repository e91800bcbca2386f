"""The proposal report's wrapper around vLLM's step output (integration/proposal_report.py).

Every installed line's ``AsyncModelRunnerOutput`` must accept the wrapper: on
vLLM 0.33 the base class gained a second abstract method
(``get_kv_connector_output``), and an engine with the adaptive policy then
failed at its first warm-up step. The GPU stream path is exercised by the
engine tests; here the output object and the synchronous path run on CPU.
"""

from types import SimpleNamespace

import torch
from vllm.v1.outputs import AsyncModelRunnerOutput, ModelRunnerOutput

from vllm_sampling_plugin.integration.proposal_report import (
    PROPOSE_ATTR,
    PROPOSED_ATTR,
    OutputWithProposals,
    following_the_plan,
    reporting_proposals,
)


def _step_output(req_ids):
    return ModelRunnerOutput(req_ids=list(req_ids), req_id_to_index={r: i for i, r in enumerate(req_ids)})


class _VllmAsyncOutput(AsyncModelRunnerOutput):
    """Stands in for the runner's AsyncOutput, implementing whatever the installed base asks."""

    def __init__(self, model_runner_output):
        self.model_runner_output = model_runner_output
        self.kv_connector_output = object()

    def get_output(self):
        return self.model_runner_output

    def get_kv_connector_output(self):
        return self.kv_connector_output


class _CopyDone:
    def __init__(self):
        self.waited = False

    def synchronize(self):
        self.waited = True


def test_wrapper_instantiates_on_the_installed_line_and_delegates():
    inner = _VllmAsyncOutput(_step_output(["a", "b", "c"]))
    copied = _CopyDone()
    counts = torch.tensor([0, 3, 1], dtype=torch.int32)
    wrapped = OutputWithProposals(inner, counts.clone(), counts, copied)

    assert isinstance(wrapped, AsyncModelRunnerOutput)
    assert wrapped.get_kv_connector_output() is inner.kv_connector_output
    assert wrapped.model_runner_output is inner.model_runner_output
    output = wrapped.get_output()
    assert copied.waited
    assert getattr(output, PROPOSED_ATTR) == [0, 3, 1]


class _Speculator:
    reports_proposals = True
    propose_this_step = True

    def __init__(self, counts):
        self.counts = torch.tensor(counts, dtype=torch.int32)

    def num_proposed(self, num_reqs):
        return self.counts[:num_reqs]


class _Runner:
    def __init__(self, speculator, output):
        self.speculator = speculator
        self.output = output

    @following_the_plan
    def execute_model(self, scheduler_output):
        return None

    @reporting_proposals
    def sample_tokens(self, grammar_output):
        return self.output


def test_synchronous_step_gets_the_counts_of_its_requests():
    output = _step_output(["a", "b"])
    runner = _Runner(_Speculator([2, 0, 7]), output)
    assert runner.sample_tokens(None) is output
    assert getattr(output, PROPOSED_ATTR) == [2, 0]


def test_runner_without_a_reporting_speculator_is_left_alone():
    output = _step_output(["a"])
    speculator = _Speculator([1])
    speculator.reports_proposals = False
    assert _Runner(speculator, output).sample_tokens(None) is output
    assert not hasattr(output, PROPOSED_ATTR)
    assert _Runner(None, None).sample_tokens(None) is None


def test_a_step_planned_without_proposal_sends_no_report():
    speculator = _Speculator([2, 0])
    runner = _Runner(speculator, _step_output(["a", "b"]))
    runner.execute_model(SimpleNamespace(**{PROPOSE_ATTR: False}))
    assert speculator.propose_this_step is False
    output = runner.sample_tokens(None)
    assert not hasattr(output, PROPOSED_ATTR)
    # The next step proposes again; without a plan (synchronous scheduling,
    # dummy runs) it always does.
    for scheduler_output in (SimpleNamespace(**{PROPOSE_ATTR: True}), SimpleNamespace()):
        runner.output = _step_output(["a", "b"])
        runner.execute_model(scheduler_output)
        assert getattr(runner.sample_tokens(None), PROPOSED_ATTR) == [2, 0]
