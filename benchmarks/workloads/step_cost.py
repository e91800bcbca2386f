"""What a decoding step costs the engine, fitted to bench e2e trace cells.

The policy replay (policy_replay.py) reproduces the engine's schedule: on
the trace cells of vLLM 0.34 it verifies and accepts the drafts the engines
did within 0.3%. What it models, not measures, is a step's time. This
module prices a step of ``T`` tokens (requests plus verified slots) as

    ridge + T + above * max(0, T - knee)

token-units (the replay's default is the linear ``ridge + T``, ``above``
zero: weights read once a step, then one unit a token; a knee lets tokens
cost more once a step turns compute-bound), and fits the three to engine
cells: each cell run at ``--requests-per-seq 1`` replays the same requests
(the first ``max_num_seqs`` of its workload file, one batch) under no
speculation, fixed k and the policy, and a model predicts the cell's ratios
(the policy against no speculation, against stock's fixed k). The fit is
the grid point with the least squared log error over the cells and any
anchors (``B:RATIO``: fixed k verifying k empty slots for each of ``B``
requests, nothing accepted, runs at ``RATIO`` of no speculation, as the
peaked checkpoint's non-repeating prompts measure it).

``python -m benchmarks.workloads fit DIR REPORT.json... [--anchor 256:0.49]``
prints the best linear model, the best model with a knee and each cell's
measured and modelled ratios.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks.workloads import policy_replay
from benchmarks.workloads.request import read_requests
from vllm_sampling_plugin import policy

NONE = "none"
# A cell's ``against`` -> the replay that stands for it.
BASELINES = {"nospec": NONE, "upstream": policy_replay.FIXED}
RIDGES = range(100, 2001, 50)
KNEES = (64, 128, 192, 256, 384, 512)
ABOVES = tuple(a / 20 for a in range(1, 41))


@dataclass(frozen=True)
class StepCost:
    """A step's time in token-units: ``ridge + T + above * max(0, T - knee)``."""

    ridge: float
    knee: float = math.inf
    above: float = 0.0

    def __call__(self, tokens: float) -> float:
        return self.ridge + tokens + self.above * max(0.0, tokens - self.knee)

    def total(self, steps: Steps) -> float:
        """The time of a run's steps."""
        excess = steps.excess(self.knee) if self.above else 0.0
        return self.ridge * steps.count + steps.tokens + self.above * excess

    def __str__(self) -> str:
        if self.above == 0.0:
            return f"{self.ridge:g} + T"
        return f"{self.ridge:g} + T + {self.above:g} x max(0, T - {self.knee:g})"


class Steps:
    """Each step's tokens of one run, summed the ways a :class:`StepCost` needs."""

    def __init__(self, step_tokens: Iterable[int]) -> None:
        self.step_tokens = list(step_tokens)
        self.count = len(self.step_tokens)
        self.tokens = sum(self.step_tokens)
        self._excess: dict[float, int] = {}

    def excess(self, knee: float) -> float:
        """Tokens above ``knee``, summed over the steps."""
        if knee not in self._excess:
            self._excess[knee] = sum(max(0, t - knee) for t in self.step_tokens)
        return self._excess[knee]


@dataclass(frozen=True)
class Cell:
    """One engine cell: what it measured and each configuration's steps."""

    name: str
    k: int
    against: str
    measured: float
    steps: dict[str, Steps]

    def modelled(self, cost: StepCost) -> float:
        """The policy's speed against ``against`` under ``cost``."""
        return cost.total(self.steps[BASELINES[self.against]]) / cost.total(
            self.steps[policy_replay.ADAPTIVE])


def none_steps(traces: Sequence[Sequence[int]]) -> list[int]:
    """Each step's tokens without speculation: one a live request."""
    longest = max(map(len, traces))
    return [sum(len(t) > s for t in traces) for s in range(longest)]


def batch_steps(requests: Sequence[tuple[Sequence[int], Sequence[int]]],
                k: int) -> dict[str, Steps]:
    """The steps of one batch without speculation, under fixed k and under
    the policy. The policy's is its second run of the batch: bench e2e times
    an engine after a warm-up run of the same requests, and the scheduler's
    policy keeps what it saw (at one sequence, whether the batch is warm)."""
    steps = {NONE: Steps(none_steps([trace for _, trace in requests]))}
    fixed: list[int] = []
    policy_replay.replay_batch(requests, k, policy_replay.FIXED, fixed)
    steps[policy_replay.FIXED] = Steps(fixed)
    adaptive = policy.AdaptiveSpeculation(k)
    policy_replay.replay_batch(requests, k, policy_replay.ADAPTIVE, adaptive=adaptive)
    timed: list[int] = []
    policy_replay.replay_batch(requests, k, policy_replay.ADAPTIVE, timed, adaptive)
    steps[policy_replay.ADAPTIVE] = Steps(timed)
    return steps


def engine_cells(build: Path, reports: Iterable[dict]) -> list[Cell]:
    """The n-gram trace cells of ``reports`` that ran one batch of their
    workload's first ``max_num_seqs`` requests, with their replayed steps
    (suffix decoding's proposer is not replayed)."""
    cells, replayed = [], {}
    for report in reports:
        if report.get("args", {}).get("requests_per_seq") != 1:
            continue
        for c in report.get("speculation", []):
            if not c.get("trace_replay") or c["method"] != "ngram" or c["against"] not in BASELINES:
                continue
            key = (c["workload"], c["max_num_seqs"], c["k"])
            if key not in replayed:
                rows = read_requests(build / f"{c['workload']}.jsonl")[:c["max_num_seqs"]]
                replayed[key] = batch_steps(
                    [(r["prompt_token_ids"], r["trace_token_ids"]) for r in rows], c["k"])
            cells.append(Cell(f"{c['workload']} {c['max_num_seqs']} k={c['k']}", c["k"],
                              c["against"], c["paired"]["median"], replayed[key]))
    return cells


def anchor_ratio(cost: StepCost, batch: int, k: int) -> float:
    """Fixed k against no speculation where nothing is accepted."""
    return cost(batch) / cost(batch * (1 + k))


def error(cost: StepCost, cells: Sequence[Cell], anchors: Sequence[tuple[int, float]],
          k: int) -> float:
    """Squared log error of ``cost`` over the cells and anchors."""
    total = sum(math.log(c.modelled(cost) / c.measured) ** 2 for c in cells)
    return total + sum(math.log(anchor_ratio(cost, b, k) / r) ** 2 for b, r in anchors)


def fit(cells: Sequence[Cell], anchors: Sequence[tuple[int, float]] = (), k: int = 3,
        knees: Sequence[float] = (math.inf,), aboves: Sequence[float] = (0.0,),
        ridges: Sequence[float] = RIDGES) -> tuple[float, StepCost]:
    """The grid point with the least :func:`error` and that error."""
    return min(((error(cost, cells, anchors, k), cost)
                for cost in (StepCost(r, kn, a) for r in ridges for kn in knees for a in aboves)),
               key=lambda scored: scored[0])


def rms_percent(err: float, terms: int) -> float:
    """A summed squared log error as an RMS error in percent."""
    return 100.0 * math.sqrt(err / max(terms, 1))


def table(cells: Sequence[Cell], models: dict[str, StepCost]) -> str:
    """Each cell's measured ratio beside each model's."""
    names = list(models)
    rows = ["| cell | against | measured | " + " | ".join(names) + " |",
            "|---|---|---:|" + "---:|" * len(names)]
    for c in cells:
        rows.append(f"| {c.name} | {c.against} | {c.measured:.3f} | "
                    + " | ".join(f"{c.modelled(models[n]):.3f}" for n in names) + " |")
    return "\n".join(rows)
