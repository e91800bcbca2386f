"""The warm-up's launches compiled one after another against compiled ahead
in parallel (ops/compile_ahead.py), on a GPU, without vLLM.

Each mode runs in a fresh interpreter with an empty Triton cache: the draw's
Gumbel-max and fused top-k/top-p kernels at one batch size per compile
variant up to ``--max-rows`` rows, and the rejection kernel with its filters
at one batch size per launch plan up to ``--max-reqs`` requests, each on
float32 and bfloat16 logits (what an engine with the plugin's verification
warms up). Prints one JSON line per mode: seconds to compile (ahead) and to
run the launches, the kernel variants in the cache after each phase, and
whether the tokens equal those of the serial mode; exits 1 where nothing
was compiled ahead, the launches after it compiled anything, or the tokens
differ.

    python3 scripts/compile_ahead_check.py --out /tmp/compile-ahead.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def cache_variants(cache: str) -> int:
    return sum(f.endswith(".json") and not f.startswith("__grp__")
               for _, _, files in os.walk(cache) for f in files)


def launches(args, device):
    """Every launch of the warm-ups; returns the tokens they drew."""
    import torch

    from vllm_sampling_plugin.integration.common.compile_variants import (
        fused_top_k_top_p_variant,
        gumbel_variant,
        representatives,
    )
    from vllm_sampling_plugin.ops.gumbel.launcher import gumbel_sample
    from vllm_sampling_plugin.ops.rejection.launcher import device_plan, rejection_sample_packed
    from vllm_sampling_plugin.ops.rejection.plan import TUNING
    from vllm_sampling_plugin.ops.topk_topp.launcher import top_k_top_p_sample

    vocab, rows, reqs, k = args.vocab, args.max_rows, args.max_reqs, args.k
    g = torch.Generator(device=device).manual_seed(0)
    logits32 = torch.randn(rows, vocab, device=device, generator=g) * 3
    temperature = torch.full((reqs,), 0.7, device=device)
    seeds = torch.arange(reqs, dtype=torch.int64, device=device)
    top_k = torch.full((reqs,), 50, dtype=torch.int32, device=device)
    top_p = torch.full((reqs,), 0.9, device=device)
    min_p = torch.zeros(reqs, device=device)
    slots = torch.arange(rows, dtype=torch.int64, device=device) % reqs
    pos = torch.arange(rows, dtype=torch.int64, device=device)
    tokens = []
    for dtype in (torch.float32, torch.bfloat16):
        logits = logits32.to(dtype)
        for n in representatives(rows, lambda n: gumbel_variant(n, vocab, False, device)):
            tokens.append(gumbel_sample(logits[:n], slots[:n], temperature, seeds, pos[:n],
                                        apply_temperature=False))
        for n in representatives(rows, lambda n: fused_top_k_top_p_variant(n, vocab)):
            tokens.append(top_k_top_p_sample(logits[:n], slots[:n], temperature, seeds, pos[:n],
                                             top_k, top_p, apply_temperature=False))
        counts = torch.arange(reqs + 1, dtype=torch.int32, device=device) * (k + 1)
        drafts = logits32[: reqs * (k + 1)].argmax(-1).to(torch.int32)
        for n in representatives(reqs, lambda n: device_plan(n, vocab, TUNING[False], device)):
            for filters in ({}, {"top_k": top_k, "top_p": top_p, "min_p": min_p}):
                sampled, _ = rejection_sample_packed(
                    logits[: n * (k + 1)], drafts[: n * (k + 1)], counts[: n + 1], slots[:n],
                    pos[: n * (k + 1)], temperature, seeds, k, apply_temperature=True, **filters)
                tokens.append(sampled)
    return tokens


def child(args) -> None:
    import torch

    from vllm_sampling_plugin.ops.compile_ahead import compile_ahead

    device = torch.device("cuda")
    torch.zeros(1, device=device)  # the CUDA context, outside the timings
    cache = os.environ["TRITON_CACHE_DIR"]
    result = {"mode": args.mode, "workers": args.workers}
    start = time.perf_counter()
    if args.mode == "ahead":
        result["compiled_ahead"] = compile_ahead(lambda: launches(args, device), args.workers)
        result["ahead_s"] = time.perf_counter() - start
        result["variants_after_ahead"] = cache_variants(cache)
    run_start = time.perf_counter()
    tokens = launches(args, device)
    torch.cuda.synchronize()
    result["run_s"] = time.perf_counter() - run_start
    result["total_s"] = time.perf_counter() - start
    result["variants_after_run"] = cache_variants(cache)
    torch.save([t.cpu() for t in tokens], args.tokens)
    print(json.dumps(result))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vocab", type=int, default=128256)
    parser.add_argument("--max-rows", type=int, default=2048)
    parser.add_argument("--max-reqs", type=int, default=256)
    parser.add_argument("-k", type=int, default=7)
    parser.add_argument("--workers", type=int, default=0, help="0: every CPU")
    parser.add_argument("--out", default="compile-ahead.json")
    parser.add_argument("--mode", choices=["serial", "ahead"], help=argparse.SUPPRESS)
    parser.add_argument("--tokens", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.mode:
        args.workers = args.workers or None
        child(args)
        return
    import torch

    results, tokens = [], {}
    with tempfile.TemporaryDirectory() as scratch:
        for mode in ("serial", "ahead"):
            env = {**os.environ, "TRITON_CACHE_DIR": os.path.join(scratch, mode),
                   "PYTHONPATH": f"{ROOT}:{os.environ.get('PYTHONPATH', '')}"}
            path = os.path.join(scratch, f"{mode}.pt")
            out = subprocess.run(
                [sys.executable, __file__, "--mode", mode, "--tokens", path, "--vocab",
                 str(args.vocab), "--max-rows", str(args.max_rows), "--max-reqs",
                 str(args.max_reqs), "-k", str(args.k), "--workers", str(args.workers)],
                env=env, capture_output=True, text=True, check=True)
            results.append(json.loads(out.stdout.strip().splitlines()[-1]))
            tokens[mode] = torch.load(path)
    results[1]["tokens_equal_serial"] = all(
        torch.equal(a, b) for a, b in zip(tokens["serial"], tokens["ahead"]))
    for result in results:
        print(json.dumps(result))
    Path(args.out).write_text(json.dumps(results, indent=1))
    ahead = results[1]
    failures = [
        what for what, failed in (
            ("nothing was compiled ahead (this Triton cannot)", not ahead["compiled_ahead"]),
            ("the launches after compiling ahead compiled more variants",
             ahead["variants_after_run"] != ahead["variants_after_ahead"]),
            ("the tokens differ from the serial run's", not ahead["tokens_equal_serial"]),
        ) if failed
    ]
    if failures:
        sys.exit("compile_ahead_check: " + "; ".join(failures))


if __name__ == "__main__":
    main()
