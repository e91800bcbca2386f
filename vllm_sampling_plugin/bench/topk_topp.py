"""Latency of top-k/top-p sampling: the plugin's fused kernel against FlashInfer and vLLM.

    python3 -m vllm_sampling_plugin.bench.topk_topp --out bench-results/topk_topp
    vllm-sampling-plugin bench topk_topp --top-k 0 --top-p 0.95
    python3 -m vllm_sampling_plugin.bench.topk_topp --tune --out bench-results/topk_topp-tune

For B rows of V float32 logits (temperature already applied, as the V2
runner's sampler has them) with top_k=50, top_p=0.9 per row it times
(``triton.testing.do_bench`` median):

* ``fused_fp32`` / ``fused_fp64``: ``ops.topk_topp.top_k_top_p_sample``, one
  seed per request (every row its own seed); ``fused_fp32_one_seed``: the
  same with one seed shared by every row, which shows that per-request
  seeds cost nothing (the kernel reads a seed per request either way);
* ``masked_plugin_gumbel``: the plugin's other route, ``ops.masking`` then
  ``ops.gumbel.gumbel_sample`` (FP32): the tokens ``fused_fp32`` must equal;
* ``flashinfer``: ``flashinfer.sampling.top_k_top_p_sampling_from_logits``
  (``deterministic=True``, as vLLM calls it);
* ``vllm_pytorch_gumbel``: vLLM 0.20's sort-based ``apply_top_k_top_p_pytorch``
  followed by its stock ``gumbel_sample`` (FP64), on a copy of the logits
  (the masking works in place); ``logits_copy`` is that copy alone;
* every column also gets ``<name>_pct_copy_bw``: the logits' bytes read once
  per call as a share of a device-to-device copy measured in the same run.

``fused_fp32_graph_us`` is ``fused_fp32`` replayed from a CUDA graph: its
device time without the host's launch time (which is what a small batch
waits for on a slow host). ``fused_matches_masked`` checks ``fused_fp32``
against ``masked_plugin_gumbel`` token for token, and ``fused_paths`` counts
which step of the merge decided the rows (``paths_out``: short list,
collected, exact); with ``--profile`` each case also gets
``fused_kernels_us``, the time of each of the fused path's kernels
(``torch.profiler``), to see where the time goes. ``bench/sampler.py`` adds
``fused_topk_topp`` (below) as a column of its own table. ``--tune``
instead times ``fused_fp32`` over a grid of ``TopKTopPTuning`` launch shapes
(chunk, group, per_group, short_list, num_warps) and prints the fastest
(tokens may only differ between shapes where a top-p mass is within rounding
of the boundary; the count of differing tokens is printed). Writes
``topk_topp.json`` (or ``tune.json``), and ``topk_topp.png`` when matplotlib
is importable.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
from collections.abc import Callable

import torch

from vllm_sampling_plugin.bench.common import (
    build_columns,
    dump_tokens,
    host_copy,
    median_us,
    plot_latency,
    record_timing,
    slowdown_scores,
    start_run,
    timed_columns,
    timing_cell,
    write_json,
    write_results,
)
from vllm_sampling_plugin.ops.topk_topp import (
    DEFAULT_TUNING,
    TopKTopPTuning,
    top_k_top_p_sample,
)


@dataclasses.dataclass
class Case:
    """Runner-style state tensors for B rows (one request slot per row)."""

    logits: torch.Tensor  # [B, V] fp32, temperature applied
    idx_mapping: torch.Tensor  # [B] int32
    temperature: torch.Tensor  # [B] fp32
    seeds: torch.Tensor  # [B] int64
    pos: torch.Tensor  # [B] int64
    top_k: torch.Tensor  # [B] int32
    top_p: torch.Tensor  # [B] fp32
    apply_temperature: bool = False


def make_case(num_rows: int, vocab_size: int, top_k: int, top_p: float, scale: float) -> Case:
    gen = torch.Generator(device="cuda").manual_seed(num_rows * 7 + vocab_size)
    return Case(
        logits=torch.randn(num_rows, vocab_size, generator=gen, device="cuda") * scale,
        idx_mapping=torch.arange(num_rows, dtype=torch.int32, device="cuda"),
        temperature=torch.rand(num_rows, generator=gen, device="cuda") + 0.5,
        seeds=torch.randint(-(2**63), 2**63 - 1, (num_rows,), generator=gen, device="cuda"),
        pos=torch.randint(0, 1 << 16, (num_rows,), generator=gen, device="cuda"),
        top_k=torch.full((num_rows,), top_k, dtype=torch.int32, device="cuda"),
        top_p=torch.full((num_rows,), top_p, dtype=torch.float32, device="cuda"),
    )


def fused_topk_topp(use_fp64: bool = False, tuning: TopKTopPTuning = DEFAULT_TUNING) -> Callable:
    """A benchmark candidate: turns a case with the attributes of ``Case``
    (``bench/sampler.py``'s has them) into the zero-argument call to time."""

    def make(case):
        return lambda: top_k_top_p_sample(
            case.logits,
            case.idx_mapping,
            case.temperature,
            case.seeds,
            case.pos,
            case.top_k,
            case.top_p,
            apply_temperature=case.apply_temperature,
            use_fp64=use_fp64,
            tuning=tuning,
        )

    return make


def masked_plugin_gumbel(case: Case):
    from vllm_sampling_plugin.ops.gumbel import gumbel_sample
    from vllm_sampling_plugin.ops.masking import mask_top_k_top_p_

    work = torch.empty_like(case.logits)

    def call():
        masked = mask_top_k_top_p_(work.copy_(case.logits), case.top_k, case.top_p)
        return gumbel_sample(
            masked,
            case.idx_mapping,
            case.temperature,
            case.seeds,
            case.pos,
            apply_temperature=case.apply_temperature,
        )

    return call


def flashinfer(case: Case):
    from flashinfer.sampling import top_k_top_p_sampling_from_logits

    return lambda: top_k_top_p_sampling_from_logits(
        case.logits, case.top_k, case.top_p, deterministic=True
    )


def vllm_pytorch_gumbel(case: Case):
    from vllm.v1.sample.ops.topk_topp_sampler import apply_top_k_top_p_pytorch
    from vllm.v1.worker.gpu.sample.gumbel import gumbel_sample as stock_gumbel_sample

    work = torch.empty_like(case.logits)

    def call():
        masked = apply_top_k_top_p_pytorch(work.copy_(case.logits), case.top_k, case.top_p)
        return stock_gumbel_sample(
            masked,
            case.idx_mapping,
            case.temperature,
            case.seeds,
            case.pos,
            case.apply_temperature,
        )

    return call


def logits_copy(case: Case):
    work = torch.empty_like(case.logits)
    return lambda: work.copy_(case.logits)


def one_seed(candidate: Callable) -> Callable:
    """``candidate`` on the case with every request's seed set to the first one."""
    return lambda case: candidate(
        dataclasses.replace(case, seeds=case.seeds[:1].expand_as(case.seeds).contiguous())
    )


CANDIDATES: dict[str, Callable] = {
    "fused_fp32": fused_topk_topp(use_fp64=False),
    "fused_fp64": fused_topk_topp(use_fp64=True),
    "fused_fp32_one_seed": one_seed(fused_topk_topp(use_fp64=False)),
    "masked_plugin_gumbel": masked_plugin_gumbel,
    "flashinfer": flashinfer,
    "vllm_pytorch_gumbel": vllm_pytorch_gumbel,
    "logits_copy": logits_copy,
}


PATH_NAMES = ("no_filter", "short_list", "collected", "exact")


def fused_paths(case: Case) -> dict:
    """How many rows each step of the merge decided (``paths_out``)."""
    paths = torch.empty(case.logits.shape[0], dtype=torch.int32, device=case.logits.device)
    top_k_top_p_sample(
        case.logits,
        case.idx_mapping,
        case.temperature,
        case.seeds,
        case.pos,
        case.top_k,
        case.top_p,
        apply_temperature=case.apply_temperature,
        paths_out=paths,
    )
    counts = torch.bincount(paths.long(), minlength=len(PATH_NAMES)).tolist()
    return dict(zip(PATH_NAMES, counts))


def graph_replay_us(call) -> float:
    """Median of ``call`` replayed from a CUDA graph: the device time alone,
    without the host's Python and launch time, which bounds small batches
    on a slow host (do_bench then times the host)."""
    call()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
    return median_us(graph.replay)


def kernel_times_us(call, reps: int = 20) -> dict:
    """Mean device time of each kernel ``call`` launches, from torch.profiler."""
    from torch.profiler import ProfilerActivity, profile

    call()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            call()
        torch.cuda.synchronize()
    return {
        event.key[:40]: event.device_time_total / reps
        for event in prof.key_averages()
        if event.device_time_total > 0
    }


# The columns whose outputs are tokens (``--dump-tokens``); FlashInfer draws
# from its own generator, so its tokens differ from run to run.
TOKEN_COLUMNS = (
    "fused_fp32",
    "fused_fp64",
    "fused_fp32_one_seed",
    "masked_plugin_gumbel",
    "vllm_pytorch_gumbel",
)


def bench_case(
    case: Case,
    names: list[str],
    bandwidth: float,
    notes: dict,
    profile: bool = False,
    tokens: dict | None = None,
) -> dict:
    num_rows, vocab_size = case.logits.shape
    logits_bytes = case.logits.numel() * case.logits.element_size()
    row: dict = {"B": num_rows, "V": vocab_size}
    calls = build_columns(CANDIDATES, names, case, notes)
    for name, call in calls.items():
        record_timing(row, name, call, bytes_read=logits_bytes, bandwidth_gbps=bandwidth)
    if "fused_fp32" in calls and "masked_plugin_gumbel" in calls:
        row["fused_matches_masked"] = bool(
            torch.equal(calls["fused_fp32"](), calls["masked_plugin_gumbel"]())
        )
    if "fused_fp32" in calls:
        row["fused_fp32_graph_us"] = graph_replay_us(calls["fused_fp32"])
        row["fused_paths"] = fused_paths(case)
        if profile:
            row["fused_kernels_us"] = kernel_times_us(calls["fused_fp32"])
    if tokens is not None:
        tokens[f"B={num_rows},V={vocab_size}"] = {
            name: host_copy(calls[name]()) for name in TOKEN_COLUMNS if name in calls
        }
    return row


def print_table(results: list[dict], names: list[str]) -> None:
    shown = timed_columns(results, names)
    print(f"{'B':>5} {'V':>7} " + " ".join(f"{n:>22}" for n in shown) + "  matches")
    for r in results:
        cells = [timing_cell(r, n, 22) for n in shown]
        match = {True: "yes", False: "NO", None: "-"}[r.get("fused_matches_masked")]
        graph = r.get("fused_fp32_graph_us")
        graph_cell = f"  fused_fp32 graph {graph:.1f} us" if graph is not None else ""
        print(f"{r['B']:>5} {r['V']:>7} " + " ".join(cells) + f"  {match:>7}{graph_cell}")
    for r in results:
        if "fused_paths" in r:
            kernels = r.get("fused_kernels_us", {})
            times = ", ".join(f"{name} {us:.1f}us" for name, us in kernels.items())
            print(f"B={r['B']} V={r['V']}: fused rows by step {r['fused_paths']}"
                  + (f"; kernels: {times}" if times else ""))


def plot(results: list[dict], names: list[str], title: str, path: str) -> bool:
    """One panel per vocabulary size, latency against batch size."""
    return plot_latency(
        results,
        names,
        path,
        title=title,
        x="B",
        xlabel="batch B",
        panel_title="V={V}",
        columns="V",
    )


def tuning_grid() -> list[TopKTopPTuning]:
    grid = itertools.product((2048, 4096, 8192), (64, 128, 256), (2, 4), (128,), (4, 8, 16))
    return [
        dataclasses.replace(
            DEFAULT_TUNING, chunk=c, group=g, per_group=n, short_list=s, num_warps=w
        )
        for c, g, n, s, w in grid
    ]


def tune(args) -> dict:
    """Time ``fused_fp32`` for every setting of ``tuning_grid``; best = lowest
    geometric mean of (time / fastest time) over the batch sizes."""
    times: dict[TopKTopPTuning, list[float]] = {}
    differing: dict[TopKTopPTuning, int] = {}
    for num_rows in args.batch_sizes:
        case = make_case(num_rows, args.tune_vocab_size, args.top_k, args.top_p, args.logit_scale)
        expected = fused_topk_topp()(case)()
        for setting in tuning_grid():
            call = fused_topk_topp(tuning=setting)(case)
            differing[setting] = differing.get(setting, 0) + int((call() != expected).sum())
            times.setdefault(setting, []).append(median_us(call, rep_ms=40))
    scores = slowdown_scores(times)
    ranked = sorted(times, key=scores.__getitem__)
    print(
        f"V={args.tune_vocab_size}, us at B={args.batch_sizes} "
        "(tokens differing from the default)"
    )
    for setting in ranked[:10] + [DEFAULT_TUNING]:
        mark = "  (default)" if setting == DEFAULT_TUNING else ""
        cells = " ".join(f"{t:8.1f}" for t in times[setting])
        print(f"  x{scores[setting]:5.3f} {cells}  ({differing[setting]}) {setting}{mark}")
    return {
        "batch_sizes": args.batch_sizes,
        "vocab_size": args.tune_vocab_size,
        "best": dataclasses.asdict(ranked[0]),
        "default": dataclasses.asdict(DEFAULT_TUNING),
        "results": [
            {"tuning": dataclasses.asdict(t), "us": times[t], "score": scores[t],
             "tokens_differing": differing[t]}
            for t in ranked
        ],
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="bench-results/topk_topp", help="output directory")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 64, 256, 1024])
    parser.add_argument("--vocab-sizes", type=int, nargs="+", default=[151936])
    parser.add_argument("--top-k", type=int, default=50, help="per row; 0 turns top-k off")
    parser.add_argument("--top-p", type=float, default=0.9, help="per row; 1 turns top-p off")
    parser.add_argument(
        "--logit-scale",
        type=float,
        default=3.0,
        help="logits are N(0, scale^2); a small scale flattens the distribution "
        "(top-p alone then needs the exact whole-row path)",
    )
    parser.add_argument(
        "--columns", nargs="+", default=list(CANDIDATES), choices=list(CANDIDATES)
    )
    parser.add_argument(
        "--dump-tokens",
        metavar="FILE",
        help="also save every token-producing column's output per case (torch.save)",
    )
    parser.add_argument("--tune", action="store_true", help="sweep TopKTopPTuning")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="also time each kernel of fused_fp32 with torch.profiler",
    )
    parser.add_argument("--tune-vocab-size", type=int, default=151936)
    args = parser.parse_args(argv)
    gpu, bandwidth = start_run("top-k/top-p", args.out)
    print(
        f"{gpu}: copy bandwidth {bandwidth:.0f} GB/s (read + write); "
        f"top_k={args.top_k}, top_p={args.top_p}, logits ~ N(0, {args.logit_scale}^2)"
    )
    if args.tune:
        report = {"gpu": gpu, "top_k": args.top_k, "top_p": args.top_p, **tune(args)}
        write_json(args.out, "tune.json", report)
        return 0
    notes: dict = {}
    tokens: dict | None = {} if args.dump_tokens else None
    results = []
    for vocab_size in args.vocab_sizes:
        for num_rows in args.batch_sizes:
            case = make_case(num_rows, vocab_size, args.top_k, args.top_p, args.logit_scale)
            results.append(bench_case(case, args.columns, bandwidth, notes, args.profile, tokens))
            del case
            torch.cuda.empty_cache()
    print_table(results, args.columns)
    if tokens is not None:
        dump_tokens(args.dump_tokens, tokens)
    for name, note in notes.items():
        print(f"{name}: {note}")
    report = {
        "gpu": gpu,
        "copy_bandwidth_gbps": bandwidth,
        "top_k": args.top_k,
        "top_p": args.top_p,
        "logit_scale": args.logit_scale,
        "tuning": dataclasses.asdict(DEFAULT_TUNING),
        "notes": notes,
        "results": results,
    }
    title = f"top-k {args.top_k} / top-p {args.top_p} sampling, median ({gpu})"
    write_results(
        args.out, "topk_topp", report, lambda path: plot(results, args.columns, title, path)
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
