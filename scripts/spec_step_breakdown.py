"""Per-step cost of adaptive n-gram speculation against a baseline engine (issues 24 and 25), on a GPU.

Starts, one after the other, two plugin engines on the 1B copy checkpoint
(vocab 128256): the ``--baseline`` one (``none``: no speculation, the
default; ``fixed``: n-gram, k = 3, every request verifying k) and one with
n-gram (k = 3) under the ``adaptive`` policy, in that order
(``--adaptive-first`` swaps it), both at max_num_seqs 64 with
gpu_memory_utilization 0.42, so both stay up and their runs alternate. On
the ``--workload`` (default ``nonrepeating``: the proposer finds nothing, so
every decode step of the adaptive engine verifies zero drafts; ``accepting``:
every draft is accepted, where adaptive and fixed k should run the same
steps), 256 requests x 64 prompt x 256 output tokens, continuous batching,
it prints per engine and writes to ``--out``/spec_step_breakdown.json:

- tok/s of each of ``--runs`` uninstrumented runs, and the host CPU each
  engine's front end and engine core used in it (``bench e2e``'s host use:
  an engine core busy for the whole run is host-bound);
- from one run with ``benchmarks/e2e/hooks.py``'s timers: steps, tokens
  generated per step, mean wall ms per engine step (one step's start to the
  next), mean host ms inside ``execute_model`` and inside ``sample_tokens``,
  mean GPU ms, which CUDA graph each step ran (``FULL/1``: full graph of
  one-token requests; ``FULL/None``: a mixed-length one) and the
  speculative-decoding counters over that run;
- CUDA launches per decode step (kernels, graph replays, async copies) from
  torch.profiler: two passes of 64 requests that differ by
  ``--profile-steps`` decode steps, so prefill and drain cancel;
- draft tokens verified and accepted over 64 greedy requests in one wave;
- each engine's engine-core pid, for scripts/host_profile.py: run this
  script under ``py-spy record --subprocesses`` and that one summarises
  the host time of each engine core's step by function.

    python3 scripts/spec_step_breakdown.py --out DIR

Needs an NVIDIA GPU and a vLLM line the adaptive policy runs on (0.20,
0.32, 0.33) with the plugin installed; about 4 minutes on an H100 once the
checkpoint is written.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.e2e import report  # noqa: E402
from benchmarks.e2e.copying import SPEC_WORKLOADS  # noqa: E402

K = 3
# The engines the adaptive one can be compared with (--baseline).
BASELINES = ("none", "fixed")
SHAPE = "1b"
VOCAB = 128256
MIX = "ngram"  # greedy requests (benchmarks/e2e/workload.py)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="directory for spec_step_breakdown.json")
    parser.add_argument("--checkpoint-dir", default="/tmp/e2e-checkpoints",
                        help="where the 1B copy checkpoint is written or found "
                             "(the bench e2e default)")
    parser.add_argument("--runs", type=int, default=3, help="timed runs per engine")
    parser.add_argument("--workload", choices=SPEC_WORKLOADS, default="nonrepeating",
                        help="bench e2e's speculation workload the runs generate "
                             "(default nonrepeating)")
    parser.add_argument("--baseline", choices=BASELINES, default="none",
                        help="the engine the adaptive one is compared with: none (no "
                             "speculation, the default) or fixed (k drafts every step)")
    parser.add_argument("--adaptive-first", action="store_true",
                        help="start the adaptive engine before the baseline one (default: "
                             "the baseline first); on 0.33 at 1B the engine started first "
                             "ran slower in every call so far (docs/benchmarks.md)")
    parser.add_argument("--max-num-seqs", type=int, default=64)
    parser.add_argument("--requests", type=int, default=256)
    parser.add_argument("--prompt-len", type=int, default=64)
    parser.add_argument("--output-len", type=int, default=256)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.42)
    parser.add_argument("--profile-steps", type=int, default=20,
                        help="decode steps between the two profiled passes")
    return parser.parse_args(argv)


def engine_specs(args: argparse.Namespace, path: str) -> dict:
    from benchmarks.e2e.engine import EngineSpec

    common = dict(role="plugin", model=path, max_num_seqs=args.max_num_seqs,
                  gpu_memory_utilization=args.gpu_memory_utilization,
                  max_model_len=args.prompt_len + args.output_len + K + 16)
    # The graphs bench e2e gives an n-gram engine: a verification step of
    # every request fits (run.capture_size).
    ngram = dict(common, ngram_k=K, max_cudagraph_capture_size=args.max_num_seqs * (K + 1))
    baseline = (EngineSpec(**common) if args.baseline == "none"
                else EngineSpec(**ngram, speculation_policy="fixed"))
    specs = {args.baseline: baseline,
             "adaptive": EngineSpec(**ngram, speculation_policy="adaptive")}
    # Engines start in this order (main).
    return dict(reversed(specs.items())) if args.adaptive_first else specs


def step_summary(timings: dict) -> dict:
    """Means per step of an instrumented pass (``Engine.step_timings``)."""
    host, execute = timings["host_ms"], timings["execute_host_ms"]
    return {
        "steps": len(host),
        "tokens_per_step": timings["run"]["tokens"] / len(host),
        "wall_ms_per_step": statistics.fmean(timings["period_ms"]),
        "execute_model_host_ms": statistics.fmean(execute),
        "sample_tokens_host_ms": statistics.fmean(h - e for h, e in zip(host, execute)),
        "gpu_ms_per_step": statistics.fmean(timings["step_gpu_ms"]),
        "graph_modes": timings["graph_modes"],
        "instrumented_tok_s": timings["run"]["tok_s"],
        "instrumented_spec": timings["spec"],
    }


def launches_per_step(short: dict, long: dict) -> dict:
    """Launches per decode step: the difference of two profiled passes over
    the difference of their steps, per launch call and in total."""
    steps = long["steps"] - short["steps"]
    names = sorted(set(short["launches"]) | set(long["launches"]))
    per_call = {n: (long["launches"].get(n, 0) - short["launches"].get(n, 0)) / steps
                for n in names}
    return {"steps": steps, "total": sum(per_call.values()), **per_call}


def call_difference(after: dict, before: dict) -> dict:
    """``{name: [calls, self host time]}`` of ``after`` minus ``before``, for
    every call in either (a call missing from one counts zero there)."""
    zero = (0, 0.0)

    def minus(name: str) -> list[float]:
        (calls, host), (calls_before, host_before) = after.get(name, zero), before.get(name, zero)
        return [calls - calls_before, host - host_before]

    return {name: minus(name) for name in set(after) | set(before)}


def calls_per_step(short: dict, long: dict) -> dict:
    """``{name: [calls, self host us]}`` per decode step of every operator,
    kernel and runtime call, the same difference as ``launches_per_step``."""
    steps = long["steps"] - short["steps"]
    return {name: [calls / steps, 1e3 * host_ms / steps]
            for name, (calls, host_ms) in call_difference(long["calls"], short["calls"]).items()}


def print_call_differences(engines: dict, baseline: str, rows: int = 25) -> None:
    """The calls whose count per decode step differs most between the engines
    (adaptive minus ``baseline``), with their self host time per step; ties
    by name."""
    base, adaptive = (engines[n]["calls_per_decode_step"] for n in (baseline, "adaptive"))
    diff = sorted(call_difference(adaptive, base).items(),
                  key=lambda item: (-abs(item[1][0]), item[0]))
    print(f"calls per decode step, adaptive - {baseline} (count, self host us):")
    for name, (count, host_us) in diff[:rows]:
        if abs(count) >= 0.1:
            print(f"  {count:+6.2f}  {host_us:+8.1f} us  {name[:110]}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from benchmarks.harness import require_gpu

    require_gpu("spec_step_breakdown")
    from benchmarks.e2e import copying
    from benchmarks.e2e.engine import Engine
    from benchmarks.e2e.run import ensure_checkpoint

    from host_profile import engine_core_pid

    start = time.perf_counter()

    def say(text: str) -> None:
        print(f"[{time.perf_counter() - start:6.1f} s] {text}", flush=True)

    path = ensure_checkpoint(args.checkpoint_dir, SHAPE, VOCAB, "copy")
    prompts = copying.workload_prompts(args.workload, args.requests, args.prompt_len, VOCAB)
    wave = args.max_num_seqs
    one_wave = prompts[:wave]
    results = {"settings": vars(args), "engines": {}}
    engines: dict = {}
    try:
        for name, spec in engine_specs(args, path).items():
            engines[name] = Engine(spec)
            results["engines"][name] = {
                "startup_s": engines[name].info["startup_s"], "tok_s": [], "host": [],
                "engine_core_pid": engine_core_pid(engines[name].pid),
                # Full runs of the workload: the timed ones and the instrumented one.
                "runs_profiled": args.runs + 1,
            }
            say(f"{name} engine up ({engines[name].info['gpu']})")
        results["gpu"] = engines["adaptive"].info["gpu"]
        names = list(engines)
        for run in range(args.runs):
            # Alternate which engine goes first.
            for name in names if run % 2 == 0 else names[::-1]:
                result = engines[name].call("throughput", mix=MIX, prompts=prompts,
                                            output_len=args.output_len, wave=wave,
                                            continuous=True)
                tok_s, host = result["tok_s"], report.host_use(result)
                results["engines"][name]["tok_s"].append(tok_s)
                results["engines"][name]["host"].append(host)
                say(f"{name} run {run + 1}: {tok_s:.0f} tok/s; {report.host_text([host])}")
        for name, engine in engines.items():
            entry = results["engines"][name]
            entry.update(step_summary(engine.call(
                "step_timings", mix=MIX, prompts=prompts, output_len=args.output_len,
                wave=wave, continuous=True)))
            short, long = (engine.call("profile", mix=MIX, prompts=one_wave, output_len=n,
                                       wave=wave, continuous=True)
                           for n in (8, 8 + args.profile_steps))
            entry["launches_per_decode_step"] = launches_per_step(short, long)
            entry["calls_per_decode_step"] = calls_per_step(short, long)
            entry["spec"] = engine.call("greedy_tokens", prompts=one_wave,
                                        output_len=64)["spec"]
            say(f"{name} instrumented and profiled")
    finally:
        for engine in engines.values():
            engine.close()

    for name, e in results["engines"].items():
        launches = e["launches_per_decode_step"]
        print(f"{name:>9}: tok/s {', '.join(f'{t:.0f}' for t in e['tok_s'])} | "
              f"{e['steps']} steps, wall {e['wall_ms_per_step']:.3f} ms/step, host "
              f"execute_model {e['execute_model_host_ms']:.3f} + sample_tokens "
              f"{e['sample_tokens_host_ms']:.3f} ms, GPU {e['gpu_ms_per_step']:.3f} ms | "
              f"launches/decode step {launches['total']:.1f} "
              f"({', '.join(f'{k} {v:.1f}' for k, v in launches.items() if k not in ('steps', 'total'))}) | "
              f"graphs {e['graph_modes']} | {e['tokens_per_step']:.1f} tokens/step, drafts "
              f"over it {e['instrumented_spec']} | one wave's drafts {e['spec']}")
    print_call_differences(results["engines"], args.baseline)
    base, adaptive = (statistics.median(results["engines"][n]["tok_s"])
                      for n in (args.baseline, "adaptive"))
    results[f"adaptive_over_{args.baseline}"] = adaptive / base
    print(f"adaptive / {args.baseline} (median tok/s): {adaptive / base:.3f}")
    os.makedirs(args.out, exist_ok=True)
    out = os.path.join(args.out, "spec_step_breakdown.json")
    with open(out, "w") as f:
        json.dump(results, f, indent=1)
    say(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
