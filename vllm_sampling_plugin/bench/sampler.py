"""Latency of one sampling step: the plugin's Gumbel-max against stock vLLM 0.20 and FlashInfer.

    python3 -m vllm_sampling_plugin.bench.sampler --out bench-results/sampler
    python3 -m vllm_sampling_plugin.bench.sampler --tune --out bench-results/sampler-tune

For B rows of V float32 logits it times (``triton.testing.do_bench`` median,
L2 flushed before every call):

* ``plugin_fp32`` / ``plugin_fp64``: ``ops.gumbel.gumbel_sample`` as the
  runner calls it (temperature already applied unless ``--apply-temperature``);
* ``stock_gumbel``: vLLM 0.20's ``gumbel_sample`` (FP64), same arguments;
* ``fused_topk_topp``: the plugin's fused top-k/top-p path
  (``ops.topk_topp.top_k_top_p_sample``, FP32, one seed per request), with
  top_k=50, top_p=0.9 per row: the route the plugin's sampler takes for
  top-k/top-p batches unless FlashInfer is forced;
* ``flashinfer_topk_topp``: ``flashinfer.sampling.top_k_top_p_sampling_from_logits``
  with the same top_k/top_p (``deterministic=True``, as vLLM calls it);
* ``vllm_topk_topp_pytorch``: vLLM's sort-based ``apply_top_k_top_p_pytorch``
  masking (top_k=50, top_p=0.9), and ``vllm_topk_topp``: ``apply_top_k_top_p``,
  which the V2 runner uses (it switches to a Triton kernel from 8 rows). Both
  mask in place, so each call first copies the logits into a work buffer; that
  copy alone is the ``logits_copy`` column;
* every column also gets ``<name>_pct_copy_bw``: the logits' bytes read once
  per call, as a share of a device-to-device copy measured in the same run.

``fp64_matches_stock`` checks that ``plugin_fp64`` returns stock's tokens.
To add a column, add a factory to ``CANDIDATES``. ``--tune`` sweeps
``ops.gumbel.TUNING`` instead and prints the fastest settings per precision
(the tokens must not change with them; that is checked too).
Writes ``sampler.json`` (or ``tune.json``), and ``sampler.png`` when
matplotlib is importable.
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
    tuning_by_precision,
    write_json,
    write_results,
)
from vllm_sampling_plugin.bench.topk_topp import fused_topk_topp
from vllm_sampling_plugin.ops import gumbel
from vllm_sampling_plugin.ops.gumbel import GumbelTuning, gumbel_sample

TOP_K, TOP_P = 50, 0.9


@dataclasses.dataclass
class Case:
    """One benchmark point: runner-style state tensors for B rows."""

    logits: torch.Tensor  # [B, V] fp32
    idx_mapping: torch.Tensor  # [B] int32
    temperature: torch.Tensor  # [B] fp32
    seeds: torch.Tensor  # [B] int64
    pos: torch.Tensor  # [B] int64
    top_k: torch.Tensor  # [B] int32
    top_p: torch.Tensor  # [B] fp32
    apply_temperature: bool


def make_case(num_rows: int, vocab_size: int, apply_temperature: bool) -> Case:
    gen = torch.Generator(device="cuda").manual_seed(num_rows * 7 + vocab_size)

    def rand(*shape):
        return torch.rand(*shape, generator=gen, device="cuda")

    return Case(
        logits=torch.randn(num_rows, vocab_size, generator=gen, device="cuda") * 3,
        idx_mapping=torch.arange(num_rows, dtype=torch.int32, device="cuda"),
        temperature=rand(num_rows) + 0.5,
        seeds=torch.randint(
            -(2**63), 2**63 - 1, (num_rows,), generator=gen, device="cuda"
        ),
        pos=torch.randint(0, 1 << 16, (num_rows,), generator=gen, device="cuda"),
        top_k=torch.full((num_rows,), TOP_K, dtype=torch.int32, device="cuda"),
        top_p=torch.full((num_rows,), TOP_P, dtype=torch.float32, device="cuda"),
        apply_temperature=apply_temperature,
    )


# A candidate turns a Case into the zero-argument call to time; raising
# (an ImportError, say) marks the column unavailable.
Candidate = Callable[[Case], Callable[[], object]]


def plugin(use_fp64: bool) -> Candidate:
    def make(case: Case):
        return lambda: gumbel_sample(
            case.logits,
            case.idx_mapping,
            case.temperature,
            case.seeds,
            case.pos,
            apply_temperature=case.apply_temperature,
            use_fp64=use_fp64,
        )

    return make


def stock_gumbel(case: Case):
    from vllm.v1.worker.gpu.sample.gumbel import gumbel_sample as stock_gumbel_sample

    return lambda: stock_gumbel_sample(
        case.logits,
        case.idx_mapping,
        case.temperature,
        case.seeds,
        case.pos,
        case.apply_temperature,
    )


def flashinfer_topk_topp(case: Case):
    from flashinfer.sampling import top_k_top_p_sampling_from_logits

    return lambda: top_k_top_p_sampling_from_logits(
        case.logits, case.top_k, case.top_p, deterministic=True
    )


def vllm_masking(function_name: str) -> Candidate:
    def make(case: Case):
        from vllm.v1.sample.ops import topk_topp_sampler

        mask = getattr(topk_topp_sampler, function_name)
        work = torch.empty_like(case.logits)
        return lambda: mask(work.copy_(case.logits), case.top_k, case.top_p)

    return make


def logits_copy(case: Case):
    work = torch.empty_like(case.logits)
    return lambda: work.copy_(case.logits)


# The columns, in order: a name -> factory entry adds one.
CANDIDATES: dict[str, Candidate] = {
    "plugin_fp32": plugin(use_fp64=False),
    "plugin_fp64": plugin(use_fp64=True),
    "stock_gumbel": stock_gumbel,
    "fused_topk_topp": fused_topk_topp(use_fp64=False),
    "flashinfer_topk_topp": flashinfer_topk_topp,
    "vllm_topk_topp_pytorch": vllm_masking("apply_top_k_top_p_pytorch"),
    "vllm_topk_topp": vllm_masking("apply_top_k_top_p"),
    "logits_copy": logits_copy,
}


# The columns whose outputs are tokens (``--dump-tokens``); FlashInfer draws
# from its own generator, so its tokens differ from run to run.
TOKEN_COLUMNS = ("plugin_fp32", "plugin_fp64", "stock_gumbel", "fused_topk_topp")


def bench_case(
    case: Case, names: list[str], bandwidth: float, notes: dict, tokens: dict | None = None
) -> dict:
    num_rows, vocab_size = case.logits.shape
    row: dict = {"B": num_rows, "V": vocab_size}
    logits_bytes = case.logits.numel() * case.logits.element_size()
    calls = build_columns(CANDIDATES, names, case, notes)
    for name, call in calls.items():
        record_timing(row, name, call, bytes_read=logits_bytes, bandwidth_gbps=bandwidth)
    if "plugin_fp64" in calls and "stock_gumbel" in calls:
        row["fp64_matches_stock"] = bool(
            torch.equal(calls["plugin_fp64"](), calls["stock_gumbel"]())
        )
    if tokens is not None:
        tokens[f"B={num_rows},V={vocab_size}"] = {
            name: host_copy(calls[name]()) for name in TOKEN_COLUMNS if name in calls
        }
    return row


def print_table(results: list[dict], names: list[str]) -> None:
    shown = timed_columns(results, names)
    print(f"{'B':>5} {'V':>7} " + " ".join(f"{n:>24}" for n in shown))
    for r in results:
        print(f"{r['B']:>5} {r['V']:>7} " + " ".join(timing_cell(r, n, 24) for n in shown))


def plot(results: list[dict], names: list[str], gpu: str, path: str) -> bool:
    """One panel per vocabulary size, latency against batch size."""
    return plot_latency(
        results,
        names,
        path,
        title=f"Sampling step latency, median ({gpu})",
        x="B",
        xlabel="batch B",
        panel_title="V={V}",
        columns="V",
    )


def tuning_grid(use_fp64: bool) -> list[GumbelTuning]:
    tiles = (512, 1024, 2048) if use_fp64 else (1024, 2048, 4096)
    grid = itertools.product(tiles, (2, 4, 8), (4, 8), (1, 2), (2, 4, 8))
    return [
        GumbelTuning(tile=t, max_tiles_per_chunk=c, num_warps=w, num_stages=s, programs_per_sm=p)
        for t, c, w, s, p in grid
    ]


def tune(args) -> dict:
    """Time every setting of ``tuning_grid``; best = lowest geometric mean of
    (time / fastest time) over the batch sizes."""
    report = {}
    for use_fp64 in (False, True):
        label = "fp64" if use_fp64 else "fp32"
        default = gumbel.TUNING[use_fp64]
        times: dict[GumbelTuning, list[float]] = {}
        try:
            for num_rows in args.batch_sizes:
                case = make_case(num_rows, args.tune_vocab_size, args.apply_temperature)
                call = plugin(use_fp64)(case)
                expected = call()
                for setting in tuning_grid(use_fp64):
                    gumbel.TUNING[use_fp64] = setting
                    if not torch.equal(call(), expected):
                        raise AssertionError(f"tokens changed with {setting}")
                    times.setdefault(setting, []).append(median_us(call, rep_ms=40))
        finally:
            gumbel.TUNING[use_fp64] = default
        scores = slowdown_scores(times)
        ranked = sorted(times, key=scores.__getitem__)
        print(f"\n{label}: V={args.tune_vocab_size}, us at B={args.batch_sizes}")
        for setting in ranked[:10] + ([default] if default in times else []):
            mark = "  (current)" if setting == default else ""
            cells = " ".join(f"{t:8.1f}" for t in times[setting])
            print(f"  x{scores[setting]:5.3f} {cells}  {setting}{mark}")
        report[label] = {
            "batch_sizes": args.batch_sizes,
            "vocab_size": args.tune_vocab_size,
            "best": dataclasses.asdict(ranked[0]),
            "current": dataclasses.asdict(default),
            "results": [
                {"tuning": dataclasses.asdict(s), "us": times[s], "score": scores[s]}
                for s in ranked
            ],
        }
    return report


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="bench-results/sampler", help="output directory")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 64, 256, 1024])
    parser.add_argument("--vocab-sizes", type=int, nargs="+", default=[32000, 128256, 151936])
    parser.add_argument(
        "--columns", nargs="+", default=list(CANDIDATES), choices=list(CANDIDATES)
    )
    parser.add_argument(
        "--apply-temperature",
        action="store_true",
        help="divide by the temperature inside the Gumbel kernels (the runner "
        "applies it beforehand, so the default is not to)",
    )
    parser.add_argument(
        "--dump-tokens",
        metavar="FILE",
        help="also save every token-producing column's output per case (torch.save)",
    )
    parser.add_argument("--tune", action="store_true", help="sweep ops.gumbel.TUNING")
    parser.add_argument("--tune-vocab-size", type=int, default=151936)
    args = parser.parse_args(argv)
    gpu, bandwidth = start_run("sampler", args.out)
    header = {
        "gpu": gpu,
        "copy_bandwidth_gbps": bandwidth,
        "apply_temperature": args.apply_temperature,
        "tuning": tuning_by_precision(gumbel.TUNING),
    }
    print(f"{gpu}: copy bandwidth {bandwidth:.0f} GB/s (read + write)")

    if args.tune:
        write_json(args.out, "tune.json", {**header, **tune(args)})
        return 0

    notes: dict = {}
    tokens: dict | None = {} if args.dump_tokens else None
    results = []
    for vocab_size in args.vocab_sizes:
        for num_rows in args.batch_sizes:
            case = make_case(num_rows, vocab_size, args.apply_temperature)
            results.append(bench_case(case, args.columns, bandwidth, notes, tokens))
            del case
            torch.cuda.empty_cache()
    print_table(results, args.columns)
    if tokens is not None:
        dump_tokens(args.dump_tokens, tokens)
    for name, note in notes.items():
        print(f"{name}: {note}")
    mismatches = [(r["B"], r["V"]) for r in results if r.get("fp64_matches_stock") is False]
    if mismatches:
        print(f"WARNING: plugin_fp64 differs from stock at (B, V) = {mismatches}")
    report = {
        **header,
        "top_k": TOP_K,
        "top_p": TOP_P,
        "notes": notes,
        "results": results,
    }
    write_results(
        args.out, "sampler", report, lambda path: plot(results, args.columns, gpu, path)
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
