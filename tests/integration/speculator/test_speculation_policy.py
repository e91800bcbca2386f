"""The adaptive speculation policy against vLLM's real schedulers (CPU): 0.20
under the plugin's n-gram proposer, 0.32 and 0.33 under upstream's.

A fresh interpreter loads the plugin through its entry point, builds vLLM's
own Scheduler or AsyncScheduler for a tiny model with n-gram speculation
(k = 3), runs requests through prefill and decode steps with hand-made
ModelRunnerOutputs that carry the proposal counts a GPU runner would send
(integration/speculator/proposal_report.py), and records how many draft tokens the
scheduler gives each request. The property under test is what the policy
promises: a request verifies what was proposed for it, never more than its
acceptance cap, and ``fixed`` gives k to everyone.
"""

import json

import pytest

from tests.integration.helpers import CPU_DEVICE_SHIM, run_python
from tests.tiny_model import write_tiny_llama
from tests.vllm_lines import INSTALLED_LINE, needs_vllm_line
from vllm_sampling_plugin.integration.settings.defaults import defaults
from vllm_sampling_plugin.integration.version import LINE_SEAMS
from vllm_sampling_plugin.policy import (
    PROBE_INTERVAL,
    RATE_WEIGHT,
    drafts_worth_verifying,
    slot_bar,
)

pytestmark = needs_vllm_line("0.20", "0.32", "0.33", "0.34")

K = 3

# Builds a scheduler and drives it. `plan` maps a step index to the
# proposal count reported for each request (by name) and how many of the
# drafts verified in that step were accepted. Prints, per step, the draft
# tokens scheduled for each request.
DRIVER = """
import json, os
os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "1"
import torch
from vllm.plugins import load_general_plugins
load_general_plugins()
from vllm.engine.arg_utils import EngineArgs
from vllm.sampling_params import SamplingParams
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from vllm.v1.outputs import ModelRunnerOutput
from vllm.v1.request import Request
from vllm.v1.structured_output import StructuredOutputManager
from vllm_sampling_plugin.policy import PROPOSE_ATTR, PROPOSED_ATTR

def index_of(req_ids):
    # Up to 0.33 the runner's output also maps each request to its row.
    import dataclasses
    if "req_id_to_index" not in {f.name for f in dataclasses.fields(ModelRunnerOutput)}:
        return {}
    return {"req_id_to_index": {r: i for i, r in enumerate(req_ids)}}

def build(policy, async_scheduling):
    engine_args = EngineArgs(
        model=MODEL, load_format="dummy", max_model_len=256, max_num_seqs=8,
        # "ngram", which stock vLLM 0.32 refuses with async scheduling and the
        # plugin schedules as "ngram_gpu" (integration/speculator/vllm_config.py).
        speculative_config={"method": "ngram", "num_speculative_tokens": K,
                            "prompt_lookup_min": 2, "prompt_lookup_max": 3},
        async_scheduling=async_scheduling, speculation_policy=policy,
        enable_prefix_caching=False,
    )
    vllm_config = engine_args.create_engine_config()
    vllm_config.cache_config.num_gpu_blocks = 256
    spec = FullAttentionSpec(block_size=16, num_kv_heads=1, head_size=16, dtype=torch.float32)
    kv = KVCacheConfig(num_blocks=256, kv_cache_tensors=[],
                       kv_cache_groups=[KVCacheGroupSpec(["layer.0"], spec)])
    cls = AsyncScheduler if async_scheduling else Scheduler
    return cls(vllm_config, kv, StructuredOutputManager(vllm_config), block_size=16)

def drive(policy, async_scheduling, names, plan, steps):
    sched = build(policy, async_scheduling)
    for name in names:
        sched.add_request(Request(name, prompt_token_ids=list(range(1, 9)),
                                  sampling_params=SamplingParams(max_tokens=64),
                                  pooling_params=None))
    record, proposes, pending = [], [], []
    step = 0
    while step < steps:
        so = sched.schedule()
        record.append({r: len(so.scheduled_spec_decode_tokens.get(r, ())) for r in so.num_scheduled_tokens})
        proposes.append(getattr(so, PROPOSE_ATTR, True))
        pending.append((step, so))
        # Async scheduling keeps one step in flight: the output of step n
        # arrives after step n + 1 is scheduled.
        if async_scheduling and len(pending) < 2:
            step += 1
            continue
        done_step, done = pending.pop(0)
        entry = plan.get(str(done_step), {})
        req_ids = list(done.num_scheduled_tokens)
        sampled = []
        for r in req_ids:
            drafts = len(done.scheduled_spec_decode_tokens.get(r, ()))
            accepted = min(entry.get("accept", {}).get(r, drafts), drafts)
            sampled.append([7] * (1 + accepted))
        out = ModelRunnerOutput(req_ids=req_ids, sampled_token_ids=sampled, **index_of(req_ids))
        # A runner told not to propose after a step sends no report.
        if getattr(done, PROPOSE_ATTR, True):
            setattr(out, PROPOSED_ATTR, [entry.get("proposed", {}).get(r, 0) for r in req_ids])
        sched.update_from_output(done, out)
        if not async_scheduling:
            from vllm.v1.outputs import DraftTokenIds
            sched.update_draft_token_ids(DraftTokenIds(req_ids, [[-1] * K for _ in req_ids]))
        step += 1
    print(json.dumps({"drafts": record, "proposes": proposes}))
"""


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> str:
    return str(write_tiny_llama(tmp_path_factory.mktemp("tiny")))


# vLLM 0.32 refuses the V2 runner without Triton, and its triton_utils gives
# the real Triton on a machine without a GPU only with CUDA_VISIBLE_DEVICES
# empty.
NO_GPU = {"CUDA_VISIBLE_DEVICES": ""}


# Sets the bar below which a warm batch verifies k for every request: 0
# tests the per-request rule (that of ten sequences and more) on the few
# requests these tests drive.
PER_REQUEST_RULE = ("import vllm_sampling_plugin.policy as policy_module\n"
                    "policy_module.VERIFY_ALL_BAR = 0.0\n")


def drive(tiny_model, policy, async_scheduling, names, plan, steps, per_request=False):
    """Per step: the draft tokens scheduled for each request, and whether the
    runner proposes after the step. ``per_request``: without the verify-all
    rule of small batches (VERIFY_ALL_BAR)."""
    out = run_python(
        prelude=CPU_DEVICE_SHIM,
        code=f"MODEL = {tiny_model!r}\nK = {K}\n" + (PER_REQUEST_RULE if per_request else "")
        + DRIVER
        + f"drive({policy!r}, {async_scheduling!r}, {names!r}, {json.loads(json.dumps(plan))!r}, {steps})",
        env=NO_GPU,
    )
    result = json.loads(out.strip().splitlines()[-1])
    return result["drafts"], result["proposes"]


def scheduled_drafts(tiny_model, policy, async_scheduling, names, plan, steps,
                     per_request=False):
    return drive(tiny_model, policy, async_scheduling, names, plan, steps, per_request)[0]


@pytest.mark.parametrize("async_scheduling", [True, False])
def test_requests_verify_what_was_proposed(tiny_model, async_scheduling):
    # Every step reports: "a" found 3 tokens, "b" none, "c" one. The
    # per-request rule, as at ten sequences and more.
    proposed = {"a": 3, "b": 0, "c": 1}
    plan = {str(s): {"proposed": proposed} for s in range(8)}
    record = scheduled_drafts(tiny_model, "adaptive", async_scheduling, ["a", "b", "c"], plan, 8,
                              per_request=True)
    # Step 0 is the prefill; the first decode steps run before any proposal
    # has arrived (one step with sync scheduling, two with async). From then
    # on each request gets exactly what was proposed for it.
    settled = record[3:]
    assert settled, record
    for step in settled:
        assert step == {"a": 3, "b": 0, "c": 1}, record


def test_a_few_warm_sequences_verify_k_whatever_was_proposed(tiny_model):
    # As above, at three sequences (bar 0.006, below VERIFY_ALL_BAR) with
    # drafts found every step: every request verifies k, as under "fixed",
    # "b" (never a proposal) and "c" (one) included.
    proposed = {"a": 3, "b": 0, "c": 1}
    plan = {str(s): {"proposed": proposed} for s in range(8)}
    record = scheduled_drafts(tiny_model, "adaptive", True, ["a", "b", "c"], plan, 8)
    settled = record[3:]
    assert settled, record
    for step in settled:
        assert step == {"a": K, "b": K, "c": K}, record


@pytest.mark.parametrize("async_scheduling", [True, False])
def test_fixed_policy_verifies_k_for_everyone(tiny_model, async_scheduling):
    plan = {str(s): {"proposed": {"a": 3, "b": 0}} for s in range(6)}
    record = scheduled_drafts(tiny_model, "fixed", async_scheduling, ["a", "b"], plan, 6)
    for step in record[1:]:
        assert step == {"a": K, "b": K}, record


def test_rejections_lower_the_rate_until_one_draft_is_verified(tiny_model):
    # "a" is always proposed 3 tokens; every draft from step 3 on is rejected.
    steps = 30
    plan = {str(s): {"proposed": {"a": 3}, "accept": {"a": 0 if s >= 3 else 3}}
            for s in range(steps)}
    # (Alone in a warm batch it would verify k whatever its rate:
    # VERIFY_ALL_BAR; this tests the per-request rule.)
    record = scheduled_drafts(tiny_model, "adaptive", False, ["a"], plan, steps, per_request=True)
    lengths = [step["a"] for step in record]
    # Sync scheduling: step s's output decides step s + 1, so step t follows
    # t - 3 rejections, each taking RATE_WEIGHT of the rate. Alone in its
    # batch a slot is nearly free: k drafts until the rate is about 1/8.
    assert lengths[1:4] == [K, K, K], lengths
    expected = [drafts_worth_verifying((1 - RATE_WEIGHT) ** (t - 3), slot_bar(1), K)
                for t in range(4, len(lengths))]
    assert lengths[4:] == expected, lengths
    assert expected[0] == K and expected[-1] == 1, expected


def test_a_batch_without_proposals_proposes_one_step_in_probe_interval(tiny_model):
    # Nothing is found for anyone until step 30; from then on "a" finds 3.
    start = 30
    plan = {str(s): {"proposed": {"a": 3}} for s in range(start, 60)}
    record, proposes = drive(tiny_model, "adaptive", True, ["a", "b"], plan, 60)
    # Drafts are verified only after a step that proposed them.
    for step in range(1, len(record)):
        if any(record[step].values()):
            assert proposes[step - 1], (step, record, proposes)
    # Every step proposes until PROBE_INTERVAL outputs have found nothing
    # (the first arrives after step 1 is scheduled); from then on, before
    # anything is found, one step in PROBE_INTERVAL does.
    probes = [s for s in range(start) if proposes[s]]
    assert probes[:PROBE_INTERVAL + 1] == list(range(PROBE_INTERVAL + 1)), proposes
    cold = probes[PROBE_INTERVAL:]
    assert len(cold) >= 3, proposes
    assert all(b - a == PROBE_INTERVAL for a, b in zip(cold, cold[1:])), proposes
    # (Step 1 verifies k before any report has arrived, as under "fixed". A
    # fresh policy counts as warm through its first PROBE_INTERVAL outputs,
    # so at two sequences the steps it decides then verify k for both:
    # VERIFY_ALL_BAR. Once cold, nothing is verified until the find.)
    assert all(set(step.values()) <= {0, K} and len(set(step.values())) == 1
               for step in record[1: PROBE_INTERVAL + 1]), record
    assert not any(any(step.values()) for step in record[PROBE_INTERVAL + 1: start + 1]), record
    # The first probe at or after `start` finds "a"'s drafts. Its report
    # arrives after the next step is scheduled (async), so every step from
    # the one after that proposes, and "a" verifies k within four steps of
    # the probe; "b" never finds any, but verifies k beside "a" from then
    # on: two sequences of a warm batch (VERIFY_ALL_BAR).
    found = next(s for s in range(start, 60) if proposes[s])
    assert found < start + PROBE_INTERVAL
    # "a" (max_tokens 64) finishes while speculating; then only "b" is left.
    last = max(s for s, step in enumerate(record) if "a" in step)
    assert last > found + 6, record
    assert all(proposes[found + 2: last]), proposes
    first = next(s for s in range(found, 60) if record[s].get("a"))
    assert first <= found + 4, (found, record)
    assert all(step["a"] == K for step in record[first: last]), record
    assert all(step["b"] == K for step in record[first: last]), record


def test_on_text_that_always_repeats_adaptive_schedules_what_fixed_does(tiny_model):
    """Every request proposes k and accepts every draft, through waves of
    requests finishing and arriving (20 requests of 64 tokens, max_num_seqs
    8, async scheduling): the adaptive policy must schedule step for step
    the drafts fixed k does, its plan proposing after every step that runs.
    (On vLLM 0.33 at 1B adaptive ran 0.74-0.88x of fixed k on such text
    under continuous batching, docs/benchmarks.md; this rules the
    scheduler's side out.)"""
    names = [f"r{i}" for i in range(20)]
    steps = 60
    plan = {str(s): {"proposed": {n: K for n in names}} for s in range(steps)}
    adaptive, proposes = drive(tiny_model, "adaptive", True, names, plan, steps)
    fixed, _ = drive(tiny_model, "fixed", True, names, plan, steps)
    assert adaptive == fixed
    # Three waves turn over, and every decode step verifies k drafts.
    ran = [step for step in fixed if step]
    assert {name for step in ran for name in step} == set(names), fixed
    assert sum(n == K for step in ran for n in step.values()) >= 20 * 64 // (K + 1) - 20, fixed
    assert all(p for p, step in zip(proposes, adaptive) if step), proposes


def test_synchronous_scheduling_proposes_every_step(tiny_model):
    record, proposes = drive(tiny_model, "adaptive", False, ["a", "b"], {}, 20)
    assert all(proposes), proposes


def test_unknown_policy_fails_naming_the_setting(tiny_model):
    out = run_python(
        prelude=CPU_DEVICE_SHIM,
        code=f"""
        from vllm.engine.arg_utils import EngineArgs
        try:
            EngineArgs(model={tiny_model!r}, speculation_policy="greedy")
        except ValueError as e:
            print("ValueError:", e)
        """,
    )
    assert out.startswith("ValueError:") and "speculation_policy='greedy'" in out
    assert "'adaptive'" in out and "'fixed'" in out


def test_cli_flag_reaches_model_config(tiny_model):
    out = run_python(
        prelude=CPU_DEVICE_SHIM,
        code=f"""
        import importlib, pickle
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.utils.argparse_utils import FlexibleArgumentParser
        # The server's parser moved: openai/ (0.20), launchers/ (0.32), common/ (0.33).
        for where in ("openai", "launchers", "common"):
            try:
                cli_args = importlib.import_module(f"vllm.entrypoints.{{where}}.cli_args")
                break
            except ModuleNotFoundError:
                continue
        make_arg_parser = cli_args.make_arg_parser
        parser = make_arg_parser(FlexibleArgumentParser())
        for flags in ([], ["--speculation-policy", "adaptive"], ["--speculation-policy", "fixed"]):
            args = parser.parse_args(["--model", {tiny_model!r}, "--load-format", "dummy"] + flags)
            model_config = AsyncEngineArgs.from_cli_args(args).create_model_config()
            print(pickle.loads(pickle.dumps(model_config)).speculation_policy)
        try:
            parser.parse_args(["--model", {tiny_model!r}, "--speculation-policy", "greedy"])
        except SystemExit as e:
            print("exit", e.code)
        """,
    )
    lines = out.strip().splitlines()
    # Unnamed: the line's default (adaptive where a GPU run measured it).
    default = defaults(LINE_SEAMS[INSTALLED_LINE])["speculation_policy"]
    assert lines[:3] == [default, "adaptive", "fixed"] and lines[-1] == "exit 2", out


@needs_vllm_line("0.20", why="the plugin's own n-gram proposer checks its settings")
def test_k_out_of_range_fails_at_start_up(tiny_model):
    out = run_python(
        prelude=CPU_DEVICE_SHIM,
        env={"VLLM_USE_V2_MODEL_RUNNER": "1"},
        code=f"""
        from vllm.engine.arg_utils import EngineArgs
        try:
            EngineArgs(model={tiny_model!r}, load_format="dummy", speculative_config={{
                "method": "ngram", "num_speculative_tokens": 3,
                "prompt_lookup_min": 2, "prompt_lookup_max": 999}}).create_engine_config()
        except Exception as e:
            print(type(e).__name__, e)
        """,
    )
    assert "prompt_lookup_max" in out, out
