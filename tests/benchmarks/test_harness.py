"""The benchmark harness's plumbing on the CPU, with fake timers: argument
parsing, case declaration, the row and JSON schema, token checks and dumps,
ratios, repeated-measurement statistics and tuning sweeps."""

import argparse
import json

import pytest
import torch

from benchmarks import harness, report
from benchmarks.harness import Area, Candidate, Ratio, Timers, TokenCheck
from benchmarks.report import Plot

BANDWIDTH_GBPS = 2000.0


def timed(us: float, fn):
    """A call the fake timers run once and report ``us`` microseconds for."""
    fn.us = us
    return fn


def fake_timers(graph_us: float = 7.0) -> Timers:
    return Timers(
        device=lambda call: (call(), call.us)[1],
        host=lambda call: (call(), call.us + 0.5)[1],
        graph=lambda call: graph_us,
        kernels=lambda call: {"kernel_a": 1.5},
        copy_bandwidth_gbps=lambda: BANDWIDTH_GBPS,
    )


def argmax_tokens(case):
    return timed(20.0, lambda: case.argmax(-1))


def plugin_tokens(case):
    return timed(10.0, lambda: case.argmax(-1))


def wrong_tokens(case):
    return timed(5.0, lambda: case.argmax(-1) + 1)


def missing_library(case):
    raise ImportError("no such library")


def failing_kernel(case):
    def call():
        raise RuntimeError("out of memory")

    return timed(1.0, call)


def host_only(case):
    return timed(30.0, lambda: None)


def fake_cases(args):
    for rows in args.rows:
        # 1e9 bytes "read" per case: 1000 us is 50 % of a 2000 GB/s copy.
        yield {"B": rows, "V": 8}, torch.arange(rows * 8, dtype=torch.float32).view(rows, 8)


def make_area(**changes) -> Area:
    declaration = dict(
        name="fake",
        description="a fake benchmark",
        keys=("B", "V"),
        candidates={
            "plugin": Candidate(
                plugin_tokens, tokens=True, graph_replay=True, profile="plugin_kernels_us"
            ),
            "stock": Candidate(argmax_tokens, tokens=True),
            "wrong": Candidate(wrong_tokens, tokens=True),
            "missing": Candidate(missing_library),
            "failing": Candidate(failing_kernel),
            "host": Candidate(host_only, host=True, counts_bytes=False),
        },
        cases=fake_cases,
        bytes_read=lambda case: 10**9,
        checks=(
            TokenCheck("plugin_matches_stock", "plugin", "stock"),
            TokenCheck("wrong_matches_stock", "wrong", "stock"),
        ),
        ratios=(Ratio("speedup", "stock", "plugin"), Ratio("never", "stock", "missing")),
        plot=Plot(title="fake ({gpu})", x="B", xlabel="B", panel_title="V={V}", columns="V"),
        add_arguments=lambda parser: parser.add_argument(
            "--rows", type=int, nargs="+", default=[2, 3]
        ),
        settings=lambda args: {"rows": args.rows},
    )
    declaration.update(changes)
    return Area(**declaration)


def run_fake(area: Area, *argv: str):
    args = area.parser().parse_args(list(argv))
    return area.run(args, BANDWIDTH_GBPS, fake_timers())


def test_row_schema_timings_checks_and_ratios():
    results, notes, tokens = run_fake(make_area())
    assert [(r["B"], r["V"]) for r in results] == [(2, 8), (3, 8)]
    row = results[0]
    assert row == {
        "B": 2,
        "V": 8,
        "plugin_us": 10.0,
        "plugin_pct_copy_bw": 5000.0,
        "stock_us": 20.0,
        "stock_pct_copy_bw": 2500.0,
        "wrong_us": 5.0,
        "wrong_pct_copy_bw": 10000.0,
        "failing_error": "RuntimeError: out of memory",
        "host_us": 30.5,
        "speedup": 2.0,
        "plugin_matches_stock": True,
        "wrong_matches_stock": False,
        "plugin_graph_us": 7.0,
    }
    assert notes == {"missing": "unavailable: ImportError: no such library"}
    assert tokens == {}


def test_unavailable_column_is_noted_once_and_never_built_again():
    built = []

    def counted_missing(case):
        built.append(case.shape)
        raise ImportError("gone")

    area = make_area(candidates={"missing": Candidate(counted_missing)}, checks=(), ratios=())
    results, notes, _ = run_fake(area, "--rows", "1", "2", "3")
    assert built == [(1, 8)]
    assert notes == {"missing": "unavailable: ImportError: gone"}
    assert results == [{"B": b, "V": 8} for b in (1, 2, 3)]


def test_required_candidate_failure_ends_the_run():
    area = make_area(candidates={"failing": Candidate(failing_kernel, required=True)}, checks=())
    with pytest.raises(RuntimeError, match="out of memory"):
        run_fake(area)


def test_error_text_is_cut():
    def long_failure(case):
        def call():
            raise RuntimeError("x" * 1000)

        return timed(1.0, call)

    results, _, _ = run_fake(make_area(candidates={"long": Candidate(long_failure)}, checks=()))
    assert len(results[0]["long_error"]) == harness.ERROR_CHARS


def test_columns_and_skipped_select_candidates():
    area = make_area(skipped=lambda args: ["wrong"])
    results, _, _ = run_fake(area, "--columns", "plugin", "stock", "wrong")
    assert {k for k in results[0] if k.endswith("_us")} == {
        "plugin_us",
        "stock_us",
        "plugin_graph_us",
    }
    assert "wrong_matches_stock" not in results[0]
    with pytest.raises(SystemExit):
        area.parser().parse_args(["--columns", "nope"])


def test_prepare_runs_before_timing_and_annotate_after():
    events = []
    area = make_area(
        candidates={
            "plugin": Candidate(
                lambda case: timed(1.0, lambda: events.append("call") or case.argmax(-1)),
                tokens=True,
            )
        },
        checks=(),
        prepare=lambda case, row: events.append(("prepare", dict(row))),
        annotate=lambda case, row, tokens: events.append(("annotate", sorted(row), sorted(tokens))),
    )
    run_fake(area, "--rows", "2", "--dump-tokens", "unused")
    # One call for the timer, one for the dumped tokens.
    assert events == [
        ("prepare", {"B": 2, "V": 8}),
        "call",
        "call",
        ("annotate", ["B", "V", "plugin_pct_copy_bw", "plugin_us"], ["plugin"]),
    ]


def test_profile_flag_only_where_a_candidate_profiles():
    results, _, _ = run_fake(make_area(), "--profile", "--rows", "2")
    assert results[0]["plugin_kernels_us"] == {"kernel_a": 1.5}
    plain = make_area(candidates={"stock": Candidate(argmax_tokens)}, checks=(), ratios=())
    with pytest.raises(SystemExit):
        plain.parser().parse_args(["--profile"])
    with pytest.raises(SystemExit):
        plain.parser().parse_args(["--tune"])


def test_main_writes_report_and_tokens(tmp_path, capsys):
    dump = tmp_path / "tokens.pt"
    area = make_area()
    assert (
        area.main(["--out", str(tmp_path / "out"), "--dump-tokens", str(dump)], fake_timers()) == 0
    )
    data = json.loads((tmp_path / "out" / "fake.json").read_text())
    assert list(data) == [
        "benchmark",
        "gpu",
        "torch",
        "triton",
        "copy_bandwidth_gbps",
        "rows",
        "notes",
        "results",
    ]
    assert data["benchmark"] == "fake"
    assert data["copy_bandwidth_gbps"] == BANDWIDTH_GBPS
    assert data["rows"] == [2, 3]
    assert data["notes"] == {"missing": "unavailable: ImportError: no such library"}
    assert [r["B"] for r in data["results"]] == [2, 3]
    tokens = torch.load(dump)
    assert list(tokens) == ["B=2,V=8", "B=3,V=8"]
    assert sorted(tokens["B=3,V=8"]) == ["plugin", "stock", "wrong"]
    assert torch.equal(tokens["B=3,V=8"]["plugin"], torch.full((3,), 7))
    assert torch.equal(tokens["B=3,V=8"]["wrong"], torch.full((3,), 8))
    out = capsys.readouterr().out
    assert "WARNING: wrong and stock differ at ['B=2,V=8', 'B=3,V=8']" in out


def test_tune_writes_tune_json(tmp_path):
    area = make_area(tune=lambda args, timers: {"best": {"tile": 1}})
    assert area.main(["--tune", "--out", str(tmp_path)], fake_timers()) == 0
    data = json.loads((tmp_path / "tune.json").read_text())
    assert data["benchmark"] == "fake" and data["best"] == {"tile": 1}
    assert not (tmp_path / "fake.json").exists()


def test_main_needs_cuda_without_fake_timers(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit, match="the fake benchmark needs a CUDA GPU"):
        make_area().main(["--out", "unused"])


def test_ngram_style_tokens_from_case_buffers():
    def writes_into_case(case):
        def call():
            case.buffer.copy_(case.values * 2)

        return timed(1.0, call)

    def cases(args):
        values = torch.arange(4)
        yield (
            {"B": 4, "V": 1},
            argparse.Namespace(values=values, buffer=torch.zeros(4, dtype=torch.long)),
        )

    area = make_area(
        candidates={
            "plugin": Candidate(writes_into_case, tokens=lambda case, _: case.buffer),
            "reference": Candidate(lambda case: timed(1.0, lambda: case.values * 2), tokens=True),
        },
        cases=cases,
        bytes_read=None,
        checks=(TokenCheck("matches", "plugin", "reference"),),
        ratios=(),
    )
    results, _, _ = run_fake(area)
    assert results == [{"B": 4, "V": 1, "plugin_us": 1.0, "reference_us": 1.0, "matches": True}]


def test_outputs_equal_compares_tuples_exactly():
    a = (torch.tensor([1, 2]), torch.tensor([3]))
    assert harness.outputs_equal(a, (torch.tensor([1, 2]), torch.tensor([3])))
    assert not harness.outputs_equal(a, (torch.tensor([1, 2]), torch.tensor([4])))
    assert not harness.outputs_equal(a, (torch.tensor([1, 2]),))


def test_repeat_pairs_interleaves_and_summarize_repeats():
    order = []
    values = {"stock": iter([10.0, 14.0, 12.0]), "plugin": iter([5.0, 4.0, 6.0])}

    def measure(name):
        def run():
            order.append(name)
            return next(values[name])

        return run

    samples = harness.repeat_pairs({"stock": measure("stock"), "plugin": measure("plugin")}, 3)
    assert order == ["stock", "plugin"] * 3
    row = harness.summarize_repeats(samples, unit="tok_s")
    assert row["stock_tok_s"] == 12.0
    assert row["stock_tok_s_min"] == 10.0 and row["stock_tok_s_max"] == 14.0
    assert row["stock_tok_s_spread_pct"] == pytest.approx(100 * 4 / 12)
    assert row["plugin_tok_s_samples"] == [5.0, 4.0, 6.0]
    assert report.console_table([row], (), ("stock", "plugin"), unit="tok_s") == (
        "    stock   plugin\n12.0tok_s 5.0tok_s"
    )
    harness.record_ratios(
        row, [Ratio("speedup", "plugin", "stock"), Ratio("x", "plugin", "e2e")], unit="tok_s"
    )
    assert row["speedup"] == pytest.approx(5.0 / 12.0)
    assert "x" not in row


def test_console_and_markdown_tables():
    rows = [
        {
            "B": 1,
            "V": 8,
            "a_us": 12.34,
            "a_pct_copy_bw": 45.6,
            "b_us": 3.0,
            "ok": True,
            "speedup": 2.5,
        },
        {"B": 64, "V": 8, "a_error": "boom", "b_us": 30.0, "ok": False},
    ]
    assert report.console_table(rows, ("B", "V"), ("a", "b", "c"), ("ok",), ("speedup",)) == (
        " B V            a      b  ok speedup\n"
        " 1 8 12.3us (46%)  3.0us yes    2.50\n"
        "64 8            - 30.0us  NO       -"
    )
    data = {"gpu": "GPU X", "copy_bandwidth_gbps": 1000.4, "results": rows}
    assert report.markdown_table(data, ("B", "V"), ("a", "b", "c")) == (
        "GPU X, measured copy bandwidth 1000 GB/s; median us (% of copy bandwidth for the "
        "bytes the op must read)\n\n"
        "| B | V | a | b |\n"
        "|---|---|---|---|\n"
        "| 1 | 8 | 12.3 (46%) | 3.0 |\n"
        "| 64 | 8 | - | 30.0 |"
    )


def test_pct_of_copy_bandwidth():
    from benchmarks.timing import pct_of_copy_bandwidth

    assert pct_of_copy_bandwidth(10**9, 1000.0, 2000.0) == pytest.approx(50.0)
