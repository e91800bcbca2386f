"""The benchmark harness: an area module declares its cases and candidates;
the harness times them in one run, pairs stock with plugin, checks tokens
and writes the report.

Declaring an area, for example (the real declarations close each area
module; ``benchmarks/rejection.py`` has ratios and a ``prepare`` step)::

    AREA = Area(
        name="sampler",                       # JSON/PNG stem, --out default
        description="Latency of one sampling step ...",
        keys=("B", "V"),                      # what identifies a row
        candidates={                          # the columns, in order
            "plugin_fp32": Candidate(plugin(False), tokens=True),
            "stock_gumbel": Candidate(stock_gumbel, tokens=True),
        },
        cases=cases,                          # args -> ((row keys, case), ...)
        bytes_read=logits_bytes,              # case -> bytes: <name>_pct_copy_bw
        checks=(TokenCheck("fp64_matches_stock", "plugin_fp64", "stock_gumbel"),),
        ratios=(Ratio("speedup", "stock_gumbel", "plugin_fp32"),),
        plot=Plot(...),
        add_arguments=add_arguments,          # the area's own flags
        settings=settings,                    # args -> report header fields
    )
    main = AREA.main

For every case, in this order, the harness: builds each selected
candidate's call (a factory that raises marks its column unavailable, one
note for the run); runs ``prepare``; times every call (do_bench median, or
host wall time for ``Candidate(host=True)``) into ``<name>_us`` and
``<name>_pct_copy_bw``, or ``<name>_error``; stores the ratios and the
token checks; replays ``graph_replay`` candidates from a CUDA graph
(``<name>_graph_us``) and, with ``--profile``, times the kernels of
``profile`` candidates (into the row key it names); runs ``annotate``; and,
with ``--dump-tokens FILE``, keeps every ``tokens`` candidate's output.
Every area gets ``--out``, ``--columns`` and ``--dump-tokens``; ``--tune``
where it declares ``tune`` (see ``benchmarks/tuning.py``), ``--profile`` where a
candidate profiles.

Calls timed against each other on the same inputs (``bench upstream``):
``measure_interleaved`` runs each once (outputs for checks), then
interleaved rounds, net of any overhead the bench adds, into one row.

Pairing repeated measurements (an end-to-end benchmark): ``repeat_pairs``
runs each named measurement N times, interleaved so that drift hits stock
and plugin alike; ``summarize_repeats`` turns the samples into a row
(``<name>_<unit>`` the median, ``_min``, ``_max``, ``_spread_pct``,
``_samples``), ``record_ratios`` adds ``Ratio`` keys to it, and ``run_header``,
``report.console_table`` and ``report.write_json`` print and write it like
every other report::

    samples = repeat_pairs({"stock": run_stock, "plugin": run_plugin}, repeats=5)
    row = {"model": name, **summarize_repeats(samples, unit="tok_s")}
    record_ratios(row, [Ratio("speedup", "plugin", "stock")], unit="tok_s")
    print(report.console_table([row], ("model",), ("stock", "plugin"),
                               ratios=("speedup",), unit="tok_s"))
    report.write_json(path, {**run_header("e2e", repeats=5), "results": [row]})
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
import triton

from benchmarks import report, timing
from benchmarks.report import Plot

# Error texts are cut so one failing column cannot flood the report.
ERROR_CHARS = 300


def outputs_equal(first: object, second: object) -> bool:
    """Exact equality of two host outputs (tensors, or tuples of them)."""
    if isinstance(first, torch.Tensor) and isinstance(second, torch.Tensor):
        return torch.equal(first, second)
    if isinstance(first, tuple) and isinstance(second, tuple):
        return len(first) == len(second) and all(map(outputs_equal, first, second))
    return first == second


@dataclasses.dataclass(frozen=True)
class Candidate:
    """One column: ``make(case)`` returns the zero-argument call to time.

    tokens: the call's output is tokens, compared by checks and dumped by
        ``--dump-tokens``; a function ``(case, output) -> tokens`` where they
        are not the output itself (an op that writes into a case buffer).
    host: time on the host (``timing.host_median_us``) instead of do_bench.
    required: a failure ends the run instead of becoming ``<name>_error``.
    counts_bytes: store ``<name>_pct_copy_bw`` (the area's ``bytes_read``).
    graph_replay: also store ``<name>_graph_us``, replayed from a CUDA graph.
    profile: with ``--profile``, the row key that gets the time of each
        kernel the call launches (torch.profiler).
    """

    make: Callable[[Any], Callable[[], object]]
    tokens: bool | Callable[[Any, object], object] = False
    host: bool = False
    required: bool = False
    counts_bytes: bool = True
    graph_replay: bool = False
    profile: str | None = None

    def tokens_of(self, case: Any, output: object) -> object:
        return report.host_copy(self.tokens(case, output) if callable(self.tokens) else output)


@dataclasses.dataclass(frozen=True)
class Ratio:
    """``row[key] = <numerator>_<unit> / <denominator>_<unit>`` when both are there."""

    key: str
    numerator: str
    denominator: str


@dataclasses.dataclass(frozen=True)
class TokenCheck:
    """``row[key]``: whether two token candidates return the same tokens."""

    key: str
    first: str
    second: str
    equal: Callable[[object, object], bool] = outputs_equal


@dataclasses.dataclass(frozen=True)
class Timers:
    """The measuring functions, replaceable by fakes in tests."""

    # (call) or (call, rep_ms) -> microseconds; tuning sweeps pass a shorter rep_ms.
    device: Callable[..., float] = timing.median_us
    host: Callable[[Callable[[], object]], float] = timing.host_median_us
    graph: Callable[[Callable[[], object]], float] = timing.graph_replay_us
    kernels: Callable[[Callable[[], object]], dict] = timing.kernel_times_us
    copy_bandwidth_gbps: Callable[[], float] = timing.copy_bandwidth_gbps


def require_gpu(benchmark: str) -> None:
    """Exit with one line, before any work, where torch sees no CUDA GPU."""
    if not torch.cuda.is_available():
        raise SystemExit(
            f"the {benchmark} benchmark needs a CUDA GPU and torch sees none: "
            "run it on a machine with an NVIDIA GPU (docs/benchmarks.md)"
        )


def run_header(benchmark: str, **settings: Any) -> dict:
    """The fields a report starts with: ``benchmark``, ``gpu`` (the device's
    name), ``torch`` and ``triton`` versions, then ``settings`` as given."""
    return {
        "benchmark": benchmark,
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU",
        "torch": torch.__version__,
        "triton": triton.__version__,
        **settings,
    }


def record_ratios(row: dict, ratios: Iterable[Ratio], unit: str = "us") -> None:
    """Store every ratio of ``ratios`` whose two columns ``row`` has."""
    for ratio in ratios:
        numerator, denominator = f"{ratio.numerator}_{unit}", f"{ratio.denominator}_{unit}"
        if numerator in row and denominator in row:
            row[ratio.key] = row[numerator] / row[denominator]


def repeat_pairs(measure: dict[str, Callable[[], float]], repeats: int) -> dict[str, list[float]]:
    """``repeats`` samples of every measurement, taken in turn (stock, plugin,
    stock, plugin, ...) so that slow drift of the machine hits all alike."""
    samples: dict[str, list[float]] = {name: [] for name in measure}
    for _ in range(repeats):
        for name, fn in measure.items():
            samples[name].append(fn())
    return samples


def summarize_repeats(samples: dict[str, list[float]], unit: str = "us") -> dict:
    """Per name: ``<name>_<unit>`` (median), ``<name>_<unit>_min``,
    ``<name>_<unit>_max``, ``<name>_<unit>_spread_pct`` ((max - min) /
    median, percent) and ``<name>_<unit>_samples``."""
    row: dict = {}
    for name, values in samples.items():
        median = statistics.median(values)
        row[f"{name}_{unit}"] = median
        row[f"{name}_{unit}_min"] = min(values)
        row[f"{name}_{unit}_max"] = max(values)
        row[f"{name}_{unit}_spread_pct"] = 100 * (max(values) - min(values)) / median
        row[f"{name}_{unit}_samples"] = list(values)
    return row


def measure_interleaved(
    calls: dict[str, Callable[[], object]],
    timer: Callable[[Callable[[], object]], float],
    repeats: int,
    *,
    overhead: tuple[str, Callable[[], object]] | None = None,
    ratios: Iterable[Ratio] = (),
) -> tuple[dict, dict[str, object]]:
    """Time ``calls`` against each other on the same inputs: ``(row, host outputs)``.

    Each call runs once first (it compiles; its output, copied to the host,
    is returned for the caller's checks; a failure raises naming the call),
    then ``repeats`` rounds of every call in turn (``repeat_pairs``), which
    ``summarize_repeats`` turns into the row; ``ratios`` are recorded on it.
    ``overhead = (name, call)``: work the bench adds to call ``name`` only
    (a copy an in-place op needs here but not in the runner), timed alone in
    the same rounds as ``overhead`` and subtracted: ``<name>_us`` is net,
    ``<name>_gross_us`` the time measured.
    """
    outputs = {}
    for name, call in calls.items():
        try:
            outputs[name] = report.host_copy(call())
        except Exception as exc:
            raise RuntimeError(f"{name}: {type(exc).__name__}: {exc}") from exc
    timed = dict(calls)
    if overhead is not None:
        overhead[1]()
        timed["overhead"] = overhead[1]
    samples = repeat_pairs({name: (lambda c=call: timer(c)) for name, call in timed.items()},
                           repeats)
    if overhead is not None:
        name = overhead[0]
        samples[f"{name}_gross"] = samples[name]
        samples[name] = [gross - extra for gross, extra
                         in zip(samples[f"{name}_gross"], samples["overhead"], strict=True)]
    row = summarize_repeats(samples)
    record_ratios(row, ratios)
    return row, outputs


@dataclasses.dataclass(frozen=True)
class Area:
    """A benchmark area: its cases and candidates (see the module docstring).

    cases: ``args -> iterable of (row keys, case)``, built lazily so one
        case's tensors are freed before the next is made.
    prepare: ``(case, row)`` before timing (e.g. measure what a mode needs).
    annotate: ``(case, row, tokens)`` after timing; ``tokens`` holds the
        host outputs of the token candidates the checks or the dump used.
    skipped: ``args -> names`` dropped from ``--columns`` (``--no-cpu``).
    table_columns: the Markdown table's columns (default: every candidate).
    details: row fields printed under the table, one line per row.
    tune: ``(args, timers) -> report`` for ``--tune`` (written to tune.json);
        it times with ``timers.device``.
    """

    name: str
    description: str
    keys: tuple[str, ...]
    candidates: dict[str, Candidate]
    cases: Callable[[argparse.Namespace], Iterable[tuple[dict, Any]]]
    plot: Plot
    bytes_read: Callable[[Any], int] | None = None
    checks: tuple[TokenCheck, ...] = ()
    ratios: tuple[Ratio, ...] = ()
    prepare: Callable[[Any, dict], None] | None = None
    annotate: Callable[[Any, dict, dict], None] | None = None
    add_arguments: Callable[[argparse.ArgumentParser], None] | None = None
    settings: Callable[[argparse.Namespace], dict] = lambda args: {}
    skipped: Callable[[argparse.Namespace], Iterable[str]] = lambda args: ()
    table_columns: tuple[str, ...] | None = None
    details: tuple[str, ...] = ()
    tune: Callable[[argparse.Namespace, Timers], dict] | None = None

    def parser(self) -> argparse.ArgumentParser:
        parser = argparse.ArgumentParser(
            prog=f"python3 -m benchmarks {self.name}", description=self.description
        )
        parser.add_argument("--out", default=f"bench-results/{self.name}", help="output directory")
        parser.add_argument(
            "--columns", nargs="+", default=list(self.candidates), choices=list(self.candidates)
        )
        parser.add_argument(
            "--dump-tokens",
            metavar="FILE",
            help="also save every token column's output per case (torch.save), "
            "for scripts/bench_compare.py tokens",
        )
        if self.tune is not None:
            parser.add_argument("--tune", action="store_true", help="sweep the launch settings")
        if any(c.profile is not None for c in self.candidates.values()):
            parser.add_argument(
                "--profile", action="store_true", help="also time each kernel with torch.profiler"
            )
        if self.add_arguments is not None:
            self.add_arguments(parser)
        return parser

    def main(self, argv: Sequence[str] | None = None, timers: Timers | None = None) -> int:
        """The command line: ``python3 -m benchmarks.<name>``.
        Tests pass fake ``timers`` (which lift the need for a GPU)."""
        args = self.parser().parse_args(argv)
        if timers is None:
            require_gpu(self.name)
            timers = Timers()
        os.makedirs(args.out, exist_ok=True)
        bandwidth = timers.copy_bandwidth_gbps()
        header = run_header(self.name, copy_bandwidth_gbps=bandwidth, **self.settings(args))
        print(f"{header['gpu']}: copy bandwidth {bandwidth:.0f} GB/s (read + write)")
        if getattr(args, "tune", False):
            report.write_json(
                os.path.join(args.out, "tune.json"), {**header, **self.tune(args, timers)}
            )
            print(f"wrote {args.out}/tune.json")
            return 0
        results, notes, tokens = self.run(args, bandwidth, timers)
        self.print_summary(results, notes, args)
        if args.dump_tokens:
            report.dump_tokens(args.dump_tokens, tokens)
        full = {**header, "notes": notes, "results": results}
        stem = os.path.join(args.out, self.name)
        report.write_json(f"{stem}.json", full)
        title = self.plot.title.format(gpu=header["gpu"], **vars(args))
        if report.plot_latency(results, self.selected(args), f"{stem}.png", self.plot, title):
            print(f"wrote {stem}.json and {stem}.png")
        else:
            print(f"wrote {stem}.json (no matplotlib: no plot)")
        return 0

    def selected(self, args: argparse.Namespace) -> list[str]:
        skipped = set(self.skipped(args))
        return [name for name in args.columns if name not in skipped]

    def run(
        self, args: argparse.Namespace, bandwidth: float, timers: Timers
    ) -> tuple[list[dict], dict[str, str], dict[str, dict]]:
        """Every case: ``(results rows, notes per column, tokens per case)``."""
        names = self.selected(args)
        results: list[dict] = []
        notes: dict[str, str] = {}
        tokens: dict[str, dict] = {}
        for keys, case in self.cases(args):
            row = dict(keys)
            case_tokens = self.measure(case, row, names, notes, bandwidth, timers, args)
            results.append(row)
            if args.dump_tokens:
                tokens[report.case_label(row, self.keys)] = case_tokens
            del case
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        return results, notes, tokens

    def measure(
        self,
        case: Any,
        row: dict,
        names: Sequence[str],
        notes: dict[str, str],
        bandwidth: float,
        timers: Timers,
        args: argparse.Namespace,
    ) -> dict[str, object]:
        """Fill ``row`` for ``case``; returns the token outputs it collected."""
        calls = self.build_calls(case, names, notes)
        if self.prepare is not None:
            self.prepare(case, row)
        bytes_read = self.bytes_read(case) if self.bytes_read is not None else None
        for name, call in calls.items():
            candidate = self.candidates[name]
            time_call(
                row,
                name,
                call,
                timers.host if candidate.host else timers.device,
                bytes_read=bytes_read if candidate.counts_bytes else None,
                bandwidth_gbps=bandwidth,
                required=candidate.required,
            )
        record_ratios(row, self.ratios)
        wanted = {n for check in self.checks for n in (check.first, check.second)}
        if args.dump_tokens:
            wanted |= {n for n in calls if self.candidates[n].tokens}
        tokens = {
            name: self.candidates[name].tokens_of(case, call())
            for name, call in calls.items()
            if name in wanted
        }
        for check in self.checks:
            if check.first in tokens and check.second in tokens:
                row[check.key] = bool(check.equal(tokens[check.first], tokens[check.second]))
        for name, call in calls.items():
            candidate = self.candidates[name]
            if candidate.graph_replay:
                row[f"{name}_graph_us"] = timers.graph(call)
            if candidate.profile is not None and args.profile:
                row[candidate.profile] = timers.kernels(call)
        if self.annotate is not None:
            self.annotate(case, row, tokens)
        return tokens

    def build_calls(
        self, case: Any, names: Sequence[str], notes: dict[str, str]
    ) -> dict[str, Callable[[], object]]:
        """The call of every named candidate that has no note yet; a factory
        that raises (an optional library missing) gets a note and is skipped
        from then on."""
        calls = {}
        for name in names:
            if name in notes:
                continue
            try:
                calls[name] = self.candidates[name].make(case)
            except Exception as exc:  # noqa: BLE001 (one note per unavailable column)
                notes[name] = f"unavailable: {type(exc).__name__}: {exc}"[:ERROR_CHARS]
        return calls

    def print_summary(self, results: list[dict], notes: dict[str, str], args) -> None:
        checks = [check.key for check in self.checks]
        ratios = [ratio.key for ratio in self.ratios]
        print(report.console_table(results, self.keys, self.selected(args), checks, ratios))
        for row in results:
            shown = {field: row[field] for field in self.details if field in row}
            if shown:
                print(f"{report.case_label(row, self.keys)}: {shown}")
        for name, note in notes.items():
            print(f"{name}: {note}")
        for check in self.checks:
            failed = [report.case_label(r, self.keys) for r in results if r.get(check.key) is False]
            if failed:
                print(f"WARNING: {check.first} and {check.second} differ at {failed}")

    def markdown(self, path: str) -> str:
        """The JSON report at ``path`` as a Markdown table (scripts/bench_tables.py)."""
        with open(path) as f:
            data = json.load(f)
        return report.markdown_table(data, self.keys, self.table_columns or tuple(self.candidates))


def time_call(
    row: dict,
    name: str,
    call: Callable[[], object],
    timer: Callable[[Callable[[], object]], float],
    *,
    bytes_read: int | None = None,
    bandwidth_gbps: float | None = None,
    required: bool = False,
) -> None:
    """Time ``call`` into ``row[f"{name}_us"]``, with ``bytes_read`` also
    ``row[f"{name}_pct_copy_bw"]``. Unless ``required``, an exception (an
    OOM, a kernel or compile failure) does not end the run: it is stored as
    ``row[f"{name}_error"]``, cut to ``ERROR_CHARS`` characters."""
    try:
        us = timer(call)
    except Exception as exc:  # noqa: BLE001 (an OOM or a kernel failure must not end the run)
        if required:
            raise
        row[f"{name}_error"] = f"{type(exc).__name__}: {exc}"[:ERROR_CHARS]
        return
    row[f"{name}_us"] = us
    if bytes_read is not None:
        row[f"{name}_pct_copy_bw"] = timing.pct_of_copy_bandwidth(bytes_read, us, bandwidth_gbps)
