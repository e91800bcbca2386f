"""``python -m benchmarks.workloads build --out DIR --seed 0``: writes the trace
workloads and stats.json, prints the copyable-share table and the build time."""

import argparse
import time
from pathlib import Path

from benchmarks.workloads.build import DEFAULT_REQUESTS, build, table
from benchmarks.workloads.request import Lengths
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
    args = parser.parse_args(argv)
    started = time.perf_counter()
    stats = build(args.out, args.seed, args.requests,
                  Lengths(args.prompt_max, args.trace_min, args.trace_max),
                  args.vocab_size, args.training_bytes)
    print(table(stats))
    print(f"built in {time.perf_counter() - started:.1f} s (Python {stats['python']}, "
          f"{stats['vocab_size']} tokens): {args.out}")


if __name__ == "__main__":
    main()
