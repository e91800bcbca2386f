"""The proposal report's wrapper around vLLM's step output (integration/speculator/proposal_report.py).

Every installed line's ``AsyncModelRunnerOutput`` must accept the wrapper: on
vLLM 0.33 the base class gained a second abstract method
(``get_kv_connector_output``), and an engine with the adaptive policy then
failed at its first warm-up step. The GPU stream path is exercised by the
engine tests; here the output object and the synchronous path run on CPU.
"""

import dataclasses
import inspect
import re
from types import SimpleNamespace

import pytest
import torch
from vllm.v1.outputs import AsyncModelRunnerOutput, ModelRunnerOutput

from vllm_sampling_plugin.integration.speculator.proposal_report import (
    OutputWithProposals,
    following_the_plan,
    reporting_proposals,
)
from vllm_sampling_plugin.policy import PROPOSE_ATTR, PROPOSED_ATTR


def _step_output(req_ids):
    # Up to 0.33 the output also maps each request to its row.
    fields = {f.name for f in dataclasses.fields(ModelRunnerOutput)}
    index = {"req_id_to_index": {r: i for i, r in enumerate(req_ids)}} if "req_id_to_index" in fields else {}
    return ModelRunnerOutput(req_ids=list(req_ids), **index)


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
    execute_model_state = None

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


class _DraftTokensHandler:
    def __init__(self):
        self.calls = []

    def set_draft_tokens(self, input_batch, draft_tokens):
        self.calls.append((input_batch, tuple(draft_tokens.shape)))


class _SpeculatingRunner:
    """The attributes upstream's ``sample_tokens`` (0.32/0.33) decides by."""

    is_last_pp_rank = True
    pp_handler = None
    pcp_manager = None
    adaptive_verification = None

    def __init__(self, *, num_draft_tokens=0, num_spec_tokens=0, propose=False):
        self.speculator = _Speculator([1, 0])
        self.speculator.propose_this_step = propose
        self.speculator.drafts = torch.zeros(4, 3, dtype=torch.int64)
        self.num_speculative_steps = 3
        self.draft_tokens_handler = _DraftTokensHandler()
        self.input_batch = SimpleNamespace(num_reqs=2, num_draft_tokens=num_draft_tokens)
        self.execute_model_state = SimpleNamespace(
            input_batch=self.input_batch, dp_sync_state=None,
            num_spec_tokens_to_schedule=num_spec_tokens)
        self.seen = None

    @reporting_proposals
    def sample_tokens(self, grammar_output):
        self.seen = (self.speculator, self.num_speculative_steps)
        if grammar_output == "fail":
            raise RuntimeError("step failed")
        return _step_output(["a", "b"])


def test_a_step_without_drafts_either_side_runs_as_without_speculation():
    runner = _SpeculatingRunner()
    speculator = runner.speculator
    output = runner.sample_tokens(None)
    # Upstream's proposer call and draft writes are skipped: it saw no speculator.
    assert runner.seen == (None, 0)
    assert (runner.speculator, runner.num_speculative_steps) == (speculator, 3)
    # The scheduler still gets this step's (empty) draft list.
    assert runner.draft_tokens_handler.calls == [(runner.input_batch, (2, 0))]
    assert not hasattr(output, PROPOSED_ATTR)


def test_the_speculator_comes_back_when_the_step_fails():
    runner = _SpeculatingRunner()
    speculator = runner.speculator
    with pytest.raises(RuntimeError, match="step failed"):
        runner.sample_tokens("fail")
    assert (runner.speculator, runner.num_speculative_steps) == (speculator, 3)


@pytest.mark.parametrize("change", [
    {"num_draft_tokens": 2},  # this step verifies drafts: the rejection sampler reads them
    {"num_spec_tokens": 3},  # the next step verifies drafts
    {"propose": True},  # the policy's probe: the proposer runs
    {"dp_sync_state": object()},
    {"is_last_pp_rank": False},
    {"pp_handler": object()},
    {"pcp_manager": object()},
    {"adaptive_verification": object()},
    {"line_without_the_field": True},
])
def test_any_step_that_may_read_drafts_keeps_upstreams_path(change):
    runner = _SpeculatingRunner(**{k: v for k, v in change.items()
                                   if k in ("num_draft_tokens", "num_spec_tokens", "propose")})
    if "dp_sync_state" in change:
        runner.execute_model_state.dp_sync_state = change["dp_sync_state"]
    if "line_without_the_field" in change:  # 0.20's ExecuteModelState
        del runner.execute_model_state.num_spec_tokens_to_schedule
    for name in ("is_last_pp_rank", "pp_handler", "pcp_manager", "adaptive_verification"):
        if name in change:
            setattr(runner, name, change[name])
    speculator = runner.speculator
    runner.sample_tokens(None)
    assert runner.seen == (speculator, 3)
    assert runner.draft_tokens_handler.calls == []


def test_upstream_reads_the_speculator_only_where_the_hidden_step_expects():
    """From 0.32 on, what a step with the speculator hidden skips of upstream's
    ``sample_tokens``: the lines that name ``self.speculator`` or
    ``self.num_speculative_steps`` are these and no others (a new one would
    need a look at whether a step without drafts may skip it too)."""
    model_runner = pytest.importorskip("vllm.v1.worker.gpu.model_runner")
    if "num_spec_tokens_to_schedule" not in model_runner.ExecuteModelState._fields:
        pytest.skip("this line's runner has no per-step draft count (0.20: the plugin's own speculator)")
    source = inspect.getsource(model_runner.GPUModelRunner.sample_tokens)
    lines = {re.sub(r"\s+", " ", line.strip()) for line in source.splitlines()
             if "self.speculator" in line or "self.num_speculative_steps" in line}
    assert lines <= {
        "defer_kv_finalize = self.speculator is not None",
        "self.speculator is not None",
        "and self.speculator.supports_mm_inputs",
        "if self.speculator is not None:",
        "if isinstance(self.speculator, DraftModelSpeculator):",
        # 0.34: draft models' own preparation, and the drafts' sync across
        # context-parallel ranks (the hidden step needs no pcp_manager).
        "self.speculator.prepare_propose(",
        "draft_tokens, input_batch.idx_mapping, self.speculator.draft_logits",
        "self.speculator.observe_verification(",
        "self.speculator.prepare_watermarking(",
        "draft_tokens = self.speculator.propose(",
        "if num_spec_tokens < self.num_speculative_steps:",
        "self.speculator.draft_token_confidence_probs, input_batch",
        "if self.num_speculative_steps > 0:",
        "# not have a speculator (i.e. self.speculator is None)",
    }, lines
    assert "if self.num_speculative_steps > 0:" in lines
