"""Launch-setting sweeps (``--tune``): time one call under every setting of a
grid on every case, check the tokens against the default setting's, and rank
the settings by their geometric-mean slowdown over the cases.

    sweep = run_sweep(cases, grid, call_with, rep_ms=40, exact=True, timer=median_us)
    print_ranking(sweep, current, "fp32: V=151936, us at B=[1, 64]")
    report = {"batch_sizes": [1, 64], **sweep.report(current)}
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Hashable, Iterable

import torch

from benchmarks.harness import outputs_equal
from benchmarks.report import host_copy


def fastest_per_case(times: dict[Hashable, list[float]]) -> list[float]:
    """For ``times = {setting: [us per case]}``, the lowest time of each case."""
    return [min(case) for case in zip(*times.values())]


def slowdown_scores(times: dict[Hashable, list[float]]) -> dict[Hashable, float]:
    """Per setting, the geometric mean over the cases of time / fastest time
    (1.0 = fastest everywhere)."""
    fastest = fastest_per_case(times)
    return {
        setting: math.exp(sum(math.log(t / f) for t, f in zip(us, fastest)) / len(fastest))
        for setting, us in times.items()
    }


def differing_tokens(first: object, second: object) -> int:
    """How many elements of two host outputs (tensors, or tuples of them) differ."""
    if isinstance(first, tuple):
        return sum(map(differing_tokens, first, second))
    return int((first != second).sum())


@dataclasses.dataclass
class Sweep:
    """``times[setting]``: microseconds per case; ``differing[setting]``:
    tokens that differ from the default setting's, summed over the cases."""

    times: dict[Hashable, list[float]]
    differing: dict[Hashable, int]
    exact: bool

    @property
    def scores(self) -> dict[Hashable, float]:
        return slowdown_scores(self.times)

    @property
    def ranked(self) -> list[Hashable]:
        scores = self.scores
        return sorted(self.times, key=scores.__getitem__)

    def report(self, current: Hashable, current_key: str = "current") -> dict:
        """``best``, ``<current_key>`` and every setting's times and score, best first."""
        scores = self.scores
        return {
            "best": dataclasses.asdict(self.ranked[0]),
            current_key: dataclasses.asdict(current),
            "results": [
                {"tuning": dataclasses.asdict(s), "us": self.times[s], "score": scores[s]}
                | ({} if self.exact else {"tokens_differing": self.differing[s]})
                for s in self.ranked
            ],
        }


def run_sweep(
    cases: Iterable[tuple[str, object]],
    grid: list[Hashable],
    call_with: Callable[[object, Hashable | None], Callable[[], object]],
    *,
    rep_ms: int,
    exact: bool,
    timer: Callable[[Callable[[], object], int], float],
) -> Sweep:
    """Time ``call_with(case, setting)`` for every setting on every case with
    ``timer(call, rep_ms)`` (``timing.median_us`` on a GPU).

        ``call_with(case, None)`` is the default setting's call, whose tokens
        every setting's are checked against: with ``exact`` a difference raises
        AssertionError (settings may only change the speed); otherwise the
        differing tokens are counted (top-p boundaries within rounding).
    """
    times: dict[Hashable, list[float]] = {setting: [] for setting in grid}
    differing: dict[Hashable, int] = {}
    for label, case in cases:
        expected = host_copy(call_with(case, None)())
        for setting in grid:
            call = call_with(case, setting)
            got = host_copy(call())
            if exact and not outputs_equal(got, expected):
                raise AssertionError(f"{label}: tokens changed with {setting}")
            if not exact:
                differing[setting] = differing.get(setting, 0) + differing_tokens(got, expected)
            times[setting].append(timer(call, rep_ms))
        print(f"{label}: {len(grid)} settings" + (", same tokens" if exact else ""))
        del case
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    return Sweep(times, differing, exact)


def print_ranking(sweep: Sweep, current: Hashable, title: str, mark: str = "current") -> None:
    """The ten best settings and the current one: score, time per case, and
    (when counted) the differing tokens."""
    scores = sweep.scores
    ranked = sweep.ranked
    print(f"\n{title}")
    for setting in ranked[:10] + ([current] if current not in ranked[:10] else []):
        cells = " ".join(f"{t:8.1f}" for t in sweep.times[setting])
        differing = "" if sweep.exact else f"  ({sweep.differing[setting]})"
        flag = f"  ({mark})" if setting == current else ""
        print(f"  x{scores[setting]:5.3f} {cells}{differing}  {setting}{flag}")


def tuning_by_precision(tuning: dict[bool, object]) -> dict[str, dict]:
    """A kernel's ``TUNING`` table (dataclasses keyed by ``use_fp64``) as JSON:
    ``{"fp32": {...}, "fp64": {...}}``."""
    return {
        "fp32": dataclasses.asdict(tuning[False]),
        "fp64": dataclasses.asdict(tuning[True]),
    }
