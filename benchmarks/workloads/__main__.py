"""``python -m benchmarks.workloads build --out DIR --seed 0``: writes the trace
workloads and stats.json, prints the copyable-share table and the build time.
``python -m benchmarks.workloads ceiling DIR``: replays a build's traces
against a prompt-lookup proposer (benchmarks/workloads/ceiling.py), writes
DIR/ceiling-OCCURRENCE-kK.json and prints its table.
``python -m benchmarks.workloads policy DIR``: replays a build's traces under
the adaptive policy and fixed k on vLLM's async schedule
(benchmarks/workloads/policy_replay.py), writes DIR/policy-replay-kK.json and
prints its table.
``python -m benchmarks.workloads fit DIR REPORT.json...``: fits a step's cost
to bench e2e trace cells of that build (benchmarks/workloads/step_cost.py)."""

import argparse
import json
import time
from pathlib import Path

from benchmarks.workloads import ceiling, policy_replay, step_cost
from benchmarks.workloads.build import DEFAULT_REQUESTS, WORKLOADS, build, table
from benchmarks.workloads.request import Lengths, read_requests
from benchmarks.workloads.tokenizer import DEFAULT_VOCAB_SIZE


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.workloads")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("build", help="build every workload into --out")
    run.add_argument("--out", type=Path, required=True)
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--requests", type=int, default=DEFAULT_REQUESTS, help="per workload")
    defaults = Lengths()
    run.add_argument("--prompt-max", type=int, default=defaults.prompt_max)
    run.add_argument("--trace-min", type=int, default=defaults.trace_min)
    run.add_argument("--trace-max", type=int, default=defaults.trace_max)
    run.add_argument("--vocab-size", type=int, default=DEFAULT_VOCAB_SIZE)
    run.add_argument("--training-bytes", type=int, default=None,
                     help="train the tokenizer on this much of the corpus (default: all of it)")
    limits = read_build(commands.add_parser(
        "ceiling", help="what n-gram speculation can take from a build"))
    limits.add_argument("--occurrence", choices=ceiling.OCCURRENCES, default="latest",
                        help="the matched n-gram's occurrence a draft copies: latest (vLLM "
                             "0.34's V2 n-gram speculator, the default) or earliest (vLLM's "
                             "CPU proposer and the plugin's kernel)")
    replay = read_build(commands.add_parser(
        "policy", help="the adaptive policy against fixed k on a build, replayed on vLLM's "
                       "async schedule"))
    replay.add_argument("--batches", type=lambda text: [int(b) for b in text.split(",")],
                        default=list(policy_replay.BATCHES),
                        help="sequences a batch, comma-separated (default 1,16,64,256)")
    replay.add_argument("--requests", type=int, default=256, help="requests replayed a "
                        "workload and batch size, at least one batch (default 256)")
    replay.add_argument("--ridge", type=float, default=500.0, help="a step's time in "
                        "token-units besides its tokens (default 500)")
    fitting = commands.add_parser(
        "fit", help="a step's cost fitted to bench e2e trace cells of a build")
    fitting.add_argument("dir", type=Path, help="the build the cells replayed")
    fitting.add_argument("reports", type=Path, nargs="+", help="bench e2e reports (JSON)")
    fitting.add_argument("--anchor", action="append", default=[], type=_anchor,
                         metavar="B:RATIO", help="fixed k with nothing accepted runs at RATIO "
                         "of no speculation at B sequences (repeatable)")
    args = parser.parse_args(argv)
    if args.command == "fit":
        write_fit(args.dir, args.reports, args.anchor)
        return
    if args.command == "ceiling":
        write_ceilings(args.dir, args.k, args.occurrence)
        return
    if args.command == "policy":
        write_policy_replays(args.dir, args.k, args.batches, args.requests, args.ridge)
        return
    started = time.perf_counter()
    stats = build(args.out, args.seed, args.requests,
                  Lengths(args.prompt_max, args.trace_min, args.trace_max),
                  args.vocab_size, args.training_bytes)
    print(table(stats))
    print(f"built in {time.perf_counter() - started:.1f} s (Python {stats['python']}, "
          f"{stats['vocab_size']} tokens): {args.out}")


def read_build(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """A command that reads a build: its folder and the drafts a step."""
    parser.add_argument("dir", type=Path)
    parser.add_argument("--k", type=int, default=3, help="draft tokens a step (default 3)")
    return parser


def write_ceilings(folder: Path, k: int, occurrence: str) -> None:
    """The ceiling of every workload file of a build in ``folder``."""
    ceilings = {}
    for name in WORKLOADS:
        path = folder / f"{name}.jsonl"
        if path.exists():
            requests = read_requests(path)
            ceilings[name] = ceiling.workload_ceiling(
                [(r["prompt_token_ids"], r["trace_token_ids"]) for r in requests], k, occurrence)
    if not ceilings:
        raise SystemExit(f"{folder} holds no workload file (build one first)")
    (folder / f"ceiling-{occurrence}-k{k}.json").write_text(json.dumps(ceilings, indent=2) + "\n")
    print(ceiling.table(ceilings))


def write_policy_replays(folder: Path, k: int, batches: list[int], requests: int,
                         ridge: float) -> None:
    """The policy replay of every workload file of a build in ``folder``."""
    replays = {}
    for name in WORKLOADS:
        path = folder / f"{name}.jsonl"
        if path.exists():
            pairs = [(r["prompt_token_ids"], r["trace_token_ids"]) for r in read_requests(path)]
            replays[name] = [
                policy_replay.workload_replay(pairs, k, batch, max(1, requests // batch), ridge)
                for batch in batches]
    if not replays:
        raise SystemExit(f"{folder} holds no workload file (build one first)")
    (folder / f"policy-replay-k{k}.json").write_text(json.dumps(replays, indent=2) + "\n")
    print(policy_replay.table(replays))


def _anchor(text: str) -> tuple[int, float]:
    batch, ratio = text.split(":")
    return int(batch), float(ratio)


def write_fit(folder: Path, reports: list[Path], anchors: list[tuple[int, float]]) -> None:
    """Print the best linear step cost and the best with a knee for the cells."""
    cells = step_cost.engine_cells(folder, (json.loads(p.read_text()) for p in reports))
    if not cells:
        raise SystemExit("no n-gram trace cell run with --requests-per-seq 1 in those reports")
    ks = {c.k for c in cells}
    if len(ks) > 1:
        raise SystemExit(f"cells of several k ({sorted(ks)}): fit one k at a time")
    k = ks.pop()
    terms = len(cells) + len(anchors)
    linear_error, linear = step_cost.fit(cells, anchors, k)
    knee_error, knee = step_cost.fit(cells, anchors, k, step_cost.KNEES, step_cost.ABOVES)
    print(f"linear: {linear} (RMS log error {step_cost.rms_percent(linear_error, terms):.1f}%)")
    print(f"knee: {knee} (RMS log error {step_cost.rms_percent(knee_error, terms):.1f}%)")
    print(step_cost.table(cells, {"linear": linear, "knee": knee}))


if __name__ == "__main__":
    main()
