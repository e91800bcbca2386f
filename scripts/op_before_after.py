"""Time every public op of two revisions of the package in one process,
interleaved, on the same inputs, and check that their tokens are identical.

    mkdir -p OLD && git archive REV vllm_sampling_plugin | tar -x -C OLD
    python3 scripts/op_before_after.py OLD [--rounds 7 --reps 30 --out R.json]

Why one process: running a benchmark once with the old package and once with
the new one puts minutes and a GPU clock change between the two sides, which
on the lent machines moves short kernels by more than the 3% a refactor must
stay within. Here the old revision is imported under another name (a copy of
its ``vllm_sampling_plugin/`` with the package name rewritten), every case of
``dump_op_tokens.op_cases`` is built once, and the two revisions' calls
alternate round by round; each side's time is the median over rounds of the
mean over ``--reps`` back-to-back calls (CUDA events). Only the public ops are
called, and they never import vLLM, so no vLLM is needed.
Exits 1 when a case's tokens differ or the new revision is more than
``--tolerance`` percent slower (a refactor must not cost time; being faster,
for example from cheaper host-side launch planning, is reported, not failed).
Cases faster than ``--min-us`` on the old side are reported but not judged:
launch time dominates them.
Each call includes the op's host work (input checks, launch planning), as a
caller of the public op pays it; kernel-only timings are the benchmarks'.
"""

from __future__ import annotations

import argparse
import importlib
import json
import pathlib
import shutil
import statistics
import sys
import tempfile

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from bench_compare import equal_outputs  # noqa: E402
from dump_op_tokens import op_cases  # noqa: E402

OLD_NAME = "vllm_sampling_plugin_before"


def import_old_ops(before_dir: str):
    """Import ``BEFORE_DIR/vllm_sampling_plugin`` as ``OLD_NAME`` (a rewritten
    copy in a temporary directory), so both revisions live in one process."""
    root = pathlib.Path(tempfile.mkdtemp(prefix="op-before-"))
    copy = root / OLD_NAME
    shutil.copytree(pathlib.Path(before_dir) / "vllm_sampling_plugin", copy)
    for source in copy.rglob("*.py"):
        text = source.read_text()
        source.write_text(text.replace("vllm_sampling_plugin", OLD_NAME))
    sys.path.insert(0, str(root))
    return importlib.import_module(f"{OLD_NAME}.ops")


def time_call(call, reps: int) -> float:
    """Mean microseconds per call over ``reps`` back-to-back calls."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        call()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1000.0 / reps


def compare_case(old_call, new_call, rounds: int, reps: int) -> dict:
    same = equal_outputs(old_call(), new_call())  # also the first (compiling) call
    old_us, new_us = [], []
    for i in range(rounds):
        # Alternate which side goes first so neither always runs on a warmer GPU.
        order = ((old_call, old_us), (new_call, new_us))
        for call, times in order if i % 2 == 0 else reversed(order):
            times.append(time_call(call, reps))
    old, new = statistics.median(old_us), statistics.median(new_us)
    return {
        "tokens_identical": same,
        "old_us": old,
        "new_us": new,
        "ratio": new / old,
        "old_spread": (max(old_us) - min(old_us)) / old,
        "new_spread": (max(new_us) - min(new_us)) / new,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", help="directory holding the old vllm_sampling_plugin/")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--vocab", type=int, default=151936)
    parser.add_argument("--max-rows", type=int, default=1024)
    parser.add_argument("--only", nargs="+", default=[], help="case-name prefixes to keep")
    parser.add_argument("--tolerance", type=float, default=3.0, help="percent")
    parser.add_argument("--min-us", type=float, default=20.0)
    parser.add_argument("--out", help="write the per-case results here (JSON)")
    args = parser.parse_args(argv)

    old_ops = import_old_ops(args.before)
    from vllm_sampling_plugin import ops as new_ops

    old_cases = op_cases(old_ops, "cuda", args.vocab, args.max_rows)
    new_cases = op_cases(new_ops, "cuda", args.vocab, args.max_rows)
    results, failures = {}, 0
    for (name, old_call), (_, new_call) in zip(old_cases, new_cases):
        if args.only and not name.startswith(tuple(args.only)):
            continue
        r = results[name] = compare_case(old_call, new_call, args.rounds, args.reps)
        judged = r["old_us"] >= args.min_us
        slower = judged and (r["ratio"] - 1) * 100 > args.tolerance
        faster = judged and (1 - r["ratio"]) * 100 > args.tolerance
        failures += slower or not r["tokens_identical"]
        print(
            f"{name:42s} old {r['old_us']:9.2f} us ({r['old_spread']:.1%})"
            f"  new {r['new_us']:9.2f} us ({r['new_spread']:.1%})  x{r['ratio']:.3f}"
            f"  tokens {'same' if r['tokens_identical'] else 'DIFFER'}"
            + ("" if judged else "  (not judged)")
            + ("  SLOWER" if slower else "  faster" if faster else ""),
            flush=True,
        )
    print(f"{len(results)} cases, {failures} failing (tokens differ, or over {args.tolerance}% slower)")
    if args.out:
        report = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                  "args": vars(args), "cases": results}
        pathlib.Path(args.out).write_text(json.dumps(report, indent=1))
    return int(failures > 0)


if __name__ == "__main__":
    sys.exit(main())
