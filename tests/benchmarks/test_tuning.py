"""``--tune`` sweeps with a fake timer: token checks, counts, ranking, report."""

import dataclasses

import pytest
import torch

from benchmarks import tuning


@dataclasses.dataclass(frozen=True)
class Setting:
    tile: int


def test_slowdown_scores_are_geometric_mean_of_time_over_fastest():
    times = {"a": [1.0, 4.0], "b": [2.0, 2.0], "c": [4.0, 8.0]}
    assert tuning.fastest_per_case(times) == [1.0, 2.0]
    scores = tuning.slowdown_scores(times)
    assert scores["a"] == pytest.approx(2**0.5)
    assert scores["b"] == pytest.approx(2**0.5)
    assert scores["c"] == pytest.approx(4.0)


def sweep_calls(shift_for_tile: dict[int, int]):
    """Calls whose time is the tile size and whose tokens are shifted by
    ``shift_for_tile[tile]``; the default setting (None) shifts nothing."""

    def call_with(case, setting):
        shift = 0 if setting is None else shift_for_tile[setting.tile]

        def call():
            return (case + shift, case)

        call.us = 0.0 if setting is None else float(setting.tile) * (1 + case.numel())
        return call

    return call_with


def fake_timer(call, rep_ms):
    assert rep_ms == 7
    return call.us


def test_exact_sweep_times_and_ranks_every_setting():
    grid = [Setting(4), Setting(2), Setting(8)]
    cases = [("B=1", torch.arange(1)), ("B=3", torch.arange(3))]
    sweep = tuning.run_sweep(
        cases, grid, sweep_calls({2: 0, 4: 0, 8: 0}), rep_ms=7, exact=True, timer=fake_timer
    )
    assert sweep.times == {
        Setting(4): [8.0, 16.0],
        Setting(2): [4.0, 8.0],
        Setting(8): [16.0, 32.0],
    }
    assert sweep.ranked == [Setting(2), Setting(4), Setting(8)]
    report = sweep.report(Setting(4))
    assert report["best"] == {"tile": 2}
    assert report["current"] == {"tile": 4}
    assert [r["tuning"] for r in report["results"]] == [{"tile": 2}, {"tile": 4}, {"tile": 8}]
    assert report["results"][1] == {
        "tuning": {"tile": 4},
        "us": [8.0, 16.0],
        "score": pytest.approx(2.0),
    }


def test_exact_sweep_refuses_changed_tokens():
    with pytest.raises(AssertionError, match="B=3: tokens changed with Setting\\(tile=8\\)"):
        tuning.run_sweep(
            [("B=3", torch.arange(3))],
            [Setting(2), Setting(8)],
            sweep_calls({2: 0, 8: 1}),
            rep_ms=7,
            exact=True,
            timer=fake_timer,
        )


def test_inexact_sweep_counts_differing_tokens():
    sweep = tuning.run_sweep(
        [("B=1", torch.arange(1)), ("B=3", torch.arange(3))],
        [Setting(2), Setting(8)],
        sweep_calls({2: 0, 8: 1}),
        rep_ms=7,
        exact=False,
        timer=fake_timer,
    )
    assert sweep.differing == {Setting(2): 0, Setting(8): 4}
    report = sweep.report(Setting(2), current_key="default")
    assert report["default"] == {"tile": 2}
    assert [r["tokens_differing"] for r in report["results"]] == [0, 4]


def test_tuning_by_precision():
    table = {False: Setting(1), True: Setting(2)}
    assert tuning.tuning_by_precision(table) == {"fp32": {"tile": 1}, "fp64": {"tile": 2}}
