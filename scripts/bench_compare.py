"""Compare two runs of a benchmark: timings row by row, and dumped tokens.

    python3 scripts/bench_compare.py timings OLD.json NEW.json [--tolerance 3] [--min-us 50]
    python3 scripts/bench_compare.py tokens OLD.pt NEW.pt

``timings`` pairs the ``results`` rows of two JSON reports by their position
(the same command line gives the same rows in the same order), prints the
new/old ratio of every ``<column>_us`` the two share, and exits 1 when a
column listed with ``--columns`` (default: every shared one) is more than
``--tolerance`` percent slower or faster; ``--min-us`` leaves out timings
whose old value is below it (host launch time dominates those, and it varies
by more than a few percent from run to run). ``tokens`` compares two
``--dump-tokens`` files case by case and column by column (``torch.equal``)
and exits 1 on any difference or on a case or column only one of them has.
"""

import argparse
import json
import sys

import torch


def compare_timings(
    old: dict, new: dict, tolerance_pct: float, columns=None, min_us: float = 0.0
) -> list[str]:
    """One line per timing both reports have (``<column>_us``, a number, old
    value at least ``min_us``); the ones off by more than ``tolerance_pct``
    end in ``OUT OF TOLERANCE``."""
    if len(old["results"]) != len(new["results"]):
        return [
            f"row counts differ: {len(old['results'])} vs {len(new['results'])} OUT OF TOLERANCE"
        ]
    lines = []
    for i, (a, b) in enumerate(zip(old["results"], new["results"])):
        case = {k: v for k, v in a.items() if type(v) in (int, str)}
        for key in sorted(a):
            if not (key.endswith("_us") and key in b and isinstance(a[key], float)):
                continue
            if columns is not None and key[: -len("_us")] not in columns or a[key] < min_us:
                continue
            ratio = b[key] / a[key]
            off = abs(ratio - 1) * 100 > tolerance_pct
            lines.append(
                f"row {i} {case}: {key} {a[key]:.2f} -> {b[key]:.2f} us (x{ratio:.3f})"
                + (" OUT OF TOLERANCE" if off else "")
            )
    return lines


def equal_outputs(a, b) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(equal_outputs(x, y) for x, y in zip(a, b))
    return a == b


def compare_tokens(old: dict, new: dict) -> list[str]:
    """One line per case and column that is missing on one side or differs."""
    problems = []
    for case in sorted(old.keys() | new.keys()):
        if case not in old or case not in new:
            problems.append(f"{case}: only in {'new' if case in new else 'old'}")
            continue
        for column in sorted(old[case].keys() | new[case].keys()):
            if column not in old[case] or column not in new[case]:
                problems.append(
                    f"{case} {column}: only in {'new' if column in new[case] else 'old'}"
                )
            elif not equal_outputs(old[case][column], new[case][column]):
                problems.append(f"{case} {column}: tokens differ")
    return problems


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    timings = sub.add_parser("timings")
    timings.add_argument("old")
    timings.add_argument("new")
    timings.add_argument("--tolerance", type=float, default=3.0, help="percent")
    timings.add_argument("--columns", nargs="+")
    timings.add_argument("--min-us", type=float, default=0.0, help="skip faster old timings")
    tokens = sub.add_parser("tokens")
    tokens.add_argument("old")
    tokens.add_argument("new")
    args = parser.parse_args(argv)
    if args.what == "timings":
        with open(args.old) as f_old, open(args.new) as f_new:
            lines = compare_timings(
                json.load(f_old), json.load(f_new), args.tolerance, args.columns, args.min_us
            )
        off = sum(line.endswith("OUT OF TOLERANCE") for line in lines)
        print("\n".join(lines))
        print(f"{len(lines)} timings compared, {off} off by more than {args.tolerance}%")
        return int(off > 0)
    old, new = torch.load(args.old), torch.load(args.new)
    problems = compare_tokens(old, new)
    print("\n".join(problems) or f"tokens identical in all {len(old)} cases")
    return int(bool(problems))


if __name__ == "__main__":
    sys.exit(main())
