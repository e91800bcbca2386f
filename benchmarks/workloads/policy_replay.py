"""The adaptive speculation policy replayed under vLLM's async schedule on a
workload's traces, before any engine runs: how many tokens a step emits and
how many draft slots it verifies, for the plugin's policy
(vllm_sampling_plugin/policy.py, the class the scheduler runs) and for
upstream's fixed k.

Each batch of ``batch`` requests starts together and runs until its last
request ends, as bench e2e's trace cells do (``--requests-per-seq 1``). Step
``s`` is scheduled before the output of step ``s - 1`` is observed, as
vLLM's AsyncScheduler does: the policy plans whether the runner proposes
after step ``s``, every request gets the placeholders of step ``s + 1``, the
step verifies the drafts proposed after step ``s - 1`` (the prompt-lookup
proposer of ceiling.py, latest occurrence, as vLLM 0.34's V2 n-gram
speculator) and emits the accepted run plus one token; then the policy
observes the output of step ``s - 1`` and shortens those placeholders.

A step's time is modelled as ``ridge + tokens``: ``ridge`` token-units for
reading the weights, one per token the step runs (requests plus verified
slots). On the 8B trace cells of vLLM 0.34 (H100) the model with ridge 500
put the old rule at 0.889x / 0.924x of fixed k at 16 / 64 sequences on code
edits, where the engines measured 0.895x / 0.910x (docs/workloads.md);
step_cost.py fits the model to engine cells.

``python -m benchmarks.workloads policy DIR`` prints the table for a build
and writes DIR/policy-replay-kK.json.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from types import SimpleNamespace

from benchmarks.workloads.ceiling import PromptLookup, accepted_run, verify_and_emit
from vllm_sampling_plugin import policy

BATCHES = (1, 16, 64, 256)
FIXED, ADAPTIVE, FOUND, ORACLE = "fixed", "adaptive", "found", "oracle"


class TracedRequest:
    """One request: its history for the proposer, the trace it emits, the
    drafts proposed after the latest step, and the policy's state (the
    attributes the plugin keeps on vLLM's Request)."""

    def __init__(self, prompt: Sequence[int], trace: Sequence[int]) -> None:
        self.history = PromptLookup(prompt, "latest")
        self.trace = trace
        self.emitted = 0
        self.drafts: list[int] = []
        self.spec_token_ids: list[int] = []
        for name, value in policy.REQUEST_DEFAULTS.items():
            setattr(self, name, value)

    def step(self, verify: int) -> tuple[int, int]:
        """Verify the first ``verify`` drafts against the trace and emit the
        accepted run plus one token; returns (tokens emitted, accepted)."""
        emitted, accepted = verify_and_emit(self.history, self.trace, self.emitted,
                                            self.drafts[:verify])
        self.emitted += emitted
        return emitted, accepted


def replay_batch(requests: Sequence[tuple[Sequence[int], Sequence[int]]], k: int,
                 verification: str, step_tokens: list[int] | None = None,
                 adaptive: policy.AdaptiveSpeculation | None = None) -> dict[str, int]:
    """One batch of (prompt ids, trace ids) run to its end under ``verification``
    (FIXED, ADAPTIVE, FOUND or ORACLE): steps, request-steps, verified slots,
    tokens, accepted. Two bounds emit fixed k's tokens: FOUND verifies every
    draft the proposer finds and no empty slot, as a scheduler that knew each
    proposal's length a step ahead would; ORACLE knows the trace and verifies
    only the drafts that will be accepted, the ceiling of any verification
    policy at the same k. Each step's tokens (requests plus verified slots)
    are appended to ``step_tokens`` where one is given (step_cost.py prices
    them). ADAPTIVE runs a fresh scheduler's policy, or ``adaptive``: one
    that served earlier batches, as an engine's does."""
    if verification != ADAPTIVE:
        adaptive = None
    elif adaptive is None:
        adaptive = policy.AdaptiveSpeculation(k)
    live = {str(i): TracedRequest(prompt, trace) for i, (prompt, trace) in enumerate(requests)}
    counts = dict.fromkeys(("steps", "request_steps", "slots", "tokens", "accepted"), 0)
    placeholders = [-1] * k  # never written: the policy hands out shorter lists
    in_flight = None  # (scheduler output, model runner output) of the step before
    while live:
        scheduled = {r: q.spec_token_ids for r, q in live.items() if q.spec_token_ids}
        scheduler_output = SimpleNamespace(scheduled_spec_decode_tokens=scheduled)
        proposes = adaptive.plan(scheduler_output) if adaptive else True
        for request in live.values():
            request.spec_token_ids = placeholders if proposes else []
        req_ids, sampled, found = [], [], []
        slots = 0
        for req_id, request in live.items():
            if verification == FOUND:
                verify = len(request.drafts)
            elif verification == ORACLE:
                verify = accepted_run(request.trace, request.emitted, request.drafts)
            else:
                verify = len(scheduled.get(req_id, ()))
            emitted, accepted = request.step(verify)
            request.drafts = request.history.propose(k) if proposes else []
            req_ids.append(req_id)
            sampled.append([0] * emitted)
            found.append(len(request.drafts))
            counts["request_steps"] += 1
            slots += verify
            counts["tokens"] += emitted
            counts["accepted"] += accepted
        counts["steps"] += 1
        counts["slots"] += slots
        if step_tokens is not None:
            step_tokens.append(len(req_ids) + slots)
        output = SimpleNamespace(req_ids=req_ids, sampled_token_ids=sampled)
        if proposes:
            setattr(output, policy.PROPOSED_ATTR, found)
        if adaptive and in_flight is not None:
            adaptive.observe(live, *in_flight)
        in_flight = (scheduler_output, output)
        for req_id in [r for r, q in live.items() if q.emitted >= len(q.trace)]:
            del live[req_id]
    return counts


def step_time(counts: dict[str, int], ridge: float) -> float:
    """The modelled time of a replay's steps: ``ridge`` a step plus its tokens."""
    return counts["steps"] * ridge + counts["request_steps"] + counts["slots"]


def workload_replay(requests: Sequence[tuple[Sequence[int], Sequence[int]]], k: int,
                    batch: int, batches: int, ridge: float) -> dict:
    """Up to ``batches`` batches of ``batch`` requests, each under fixed k and
    under the policy, and the modelled speed of each against no speculation
    (one token a request-step, a batch lasting its longest trace)."""
    totals = {mode: Counter() for mode in (FIXED, ADAPTIVE, FOUND, ORACLE)}
    none_steps = tokens = 0
    replayed = requests[:batch * batches]
    for start in range(0, len(replayed), batch):
        group = replayed[start:start + batch]
        none_steps += max(len(trace) for _, trace in group)
        tokens += sum(len(trace) for _, trace in group)
        for verification, total in totals.items():
            total.update(replay_batch(group, k, verification))
    none_time = none_steps * ridge + tokens
    result = {"batch": batch, "requests": len(replayed), "k": k, "ridge": ridge}
    for verification, counts in totals.items():
        result[verification] = {
            **dict(counts),
            "tokens_per_request_step": round(counts["tokens"] / counts["request_steps"], 3),
            "slots_per_request_step": round(counts["slots"] / counts["request_steps"], 3),
            "against_none": round(none_time / step_time(counts, ridge), 3),
        }
    for verification in (ADAPTIVE, FOUND, ORACLE):
        result[f"{verification}_against_fixed"] = round(
            step_time(totals[FIXED], ridge) / step_time(totals[verification], ridge), 3)
    return result


def table(replays: dict[str, list[dict]]) -> str:
    """A build's replays as a markdown table."""
    rows = ["| workload | sequences | tokens a request-step: fixed k / adaptive | slots a "
            "request-step: fixed k / adaptive | modelled speed against none: fixed k / "
            "adaptive | adaptive / fixed k | bounds / fixed k: found, oracle |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, cells in replays.items():
        for c in cells:
            f, a = c[FIXED], c[ADAPTIVE]
            rows.append(
                f"| {name} | {c['batch']} | {f['tokens_per_request_step']:.2f} / "
                f"{a['tokens_per_request_step']:.2f} | {f['slots_per_request_step']:.2f} / "
                f"{a['slots_per_request_step']:.2f} | {f['against_none']:.3f} / "
                f"{a['against_none']:.3f} | {c['adaptive_against_fixed']:.3f} | "
                f"{c['found_against_fixed']:.3f}, {c['oracle_against_fixed']:.3f} |")
    return "\n".join(rows)
