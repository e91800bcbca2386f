"""Where each engine core spent its host time: py-spy stacks, summarised.

Run scripts/spec_step_breakdown.py under py-spy, which must be its ancestor
to read the engine processes (no ptrace capability needed then), then
summarise per engine core:

    py-spy record --subprocesses --idle --nonblocking --rate 250 --format raw \\
        -o DIR/stacks.txt -- python3 scripts/spec_step_breakdown.py --out DIR
    python3 scripts/host_profile.py DIR/stacks.txt DIR/spec_step_breakdown.json

spec_step_breakdown.json names each engine's engine-core pid and its steps
per run; this keeps the stacks of each engine core inside its step
(``step_with_batch_queue`` / ``step``: the scheduler and, with one GPU, the
worker's ``execute_model`` / ``sample_tokens`` on the same thread), and
prints milliseconds per step by function, inclusive and self, the second
engine against the first. Both engines ran the same requests, so the
difference is what the second one's configuration costs the host.
py-spy is not a dependency: ``pip download py-spy``, unzip, use
``py_spy-*.data/scripts/py-spy``.
"""

from __future__ import annotations

import collections
import json
import os
import re
import sys

STEP_FRAMES = ("step_with_batch_queue", "step")


def engine_core_pid(parent_pid: int) -> int | None:
    """The engine-core process below ``parent_pid`` (vLLM titles it EngineCore)."""
    import psutil

    for child in psutil.Process(parent_pid).children(recursive=True):
        try:
            title = " ".join(child.cmdline()) + " " + child.name()
        except psutil.Error:
            continue
        if "EngineCore" in title:
            return child.pid
    return None


# A process frame, "process PID:"command line"", may hold ";" in its command line.
_PROCESS = re.compile(r'process (\d+):"[^"]*";?')


def _split(line: str) -> tuple[int | None, list[str], int]:
    """(innermost process pid, Python frames, samples) of one raw line."""
    stack, _, count = line.rstrip("\n").rpartition(" ")
    pid = None
    for match in _PROCESS.finditer(stack):
        pid = int(match.group(1))
    frames = []
    for part in _PROCESS.sub("", stack).split(";"):
        if part:
            name, _, where = part.partition(" (")
            frames.append(f"{name} ({os.path.basename(where.rsplit(':', 1)[0])})")
    return pid, frames, int(count) if count.isdigit() else 0


def summarise(raw_path: str, pid: int, rate: float) -> dict:
    """Seconds per function inside the step of engine core ``pid``."""
    inclusive: collections.Counter = collections.Counter()
    self_time: collections.Counter = collections.Counter()
    in_step = 0
    with open(raw_path) as f:
        for line in f:
            line_pid, frames, n = _split(line)
            if line_pid != pid or not n:
                continue
            # From the step frame down: its callers are in every stack.
            step = next((i for i, fr in enumerate(frames)
                         if fr.split(" (")[0].rsplit(".", 1)[-1] in STEP_FRAMES), None)
            if step is None:
                continue
            frames = frames[step:]
            in_step += n
            for name in set(frames):
                inclusive[name] += n
            self_time[frames[-1]] += n
    return {
        "step_s": in_step / rate,
        "inclusive_s": {k: v / rate for k, v in inclusive.most_common()},
        "self_s": {k: v / rate for k, v in self_time.most_common()},
    }


def compare(a: dict, b: dict, steps_a: int, steps_b: int, key: str, top: int) -> list[tuple]:
    """(function, ms per step in a, in b, b - a), largest difference first."""
    rows = []
    for name in set(a[key]) | set(b[key]):
        x = 1e3 * a[key].get(name, 0.0) / steps_a
        y = 1e3 * b[key].get(name, 0.0) / steps_b
        rows.append((name, x, y, y - x))
    return sorted(rows, key=lambda r: -abs(r[3]))[:top]


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print(__doc__)
        return 2
    raw_path, breakdown_path = argv[:2]
    rate = float(argv[2]) if len(argv) == 3 else 250.0
    with open(breakdown_path) as f:
        engines = json.load(f)["engines"]
    names = [n for n in engines if engines[n].get("engine_core_pid")]
    if len(names) < 2:
        print("spec_step_breakdown.json names fewer than two engine-core pids")
        return 1
    summaries, steps = {}, {}
    for name in names:
        summaries[name] = summarise(raw_path, engines[name]["engine_core_pid"], rate)
        # Every run of an engine (timed, instrumented, profiled) went through
        # its step; the instrumented run's count stands for each run.
        steps[name] = engines[name]["steps"] * engines[name]["runs_profiled"]
    first, second = names[:2]
    out = {"rate": rate, "steps": steps, "engines": summaries, "compare": {}}
    for key in ("inclusive_s", "self_s"):
        rows = compare(summaries[first], summaries[second], steps[first], steps[second], key, 25)
        out["compare"][key] = rows
        print(f"\n{key[:-2]} host ms per step: {first} -> {second}")
        for name, x, y, d in rows:
            print(f"  {d:+8.3f}  {x:8.3f} -> {y:8.3f}  {name}")
    target = os.path.join(os.path.dirname(breakdown_path), "host_profile.json")
    with open(target, "w") as f:
        json.dump(out, f, indent=1)
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
