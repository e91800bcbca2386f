"""Latency of top-k/top-p sampling: the plugin's fused kernel against FlashInfer and vLLM.

    python3 -m benchmarks.topk_topp --out bench-results/topk_topp
    python3 -m benchmarks topk_topp --top-k 0 --top-p 0.95
    python3 -m benchmarks.topk_topp --tune --out bench-results/topk_topp-tune

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
(``torch.profiler``), to see where the time goes. ``benchmarks/sampler.py`` adds
``fused_topk_topp`` (below) as a column of its own table. ``--tune``
instead times ``fused_fp32`` over a grid of ``TopKTopPTuning`` launch shapes
(chunk, group, per_group, short_list, num_warps) and prints the fastest
(tokens may only differ between shapes where a top-p mass is within rounding
of the boundary; the count of differing tokens is printed). Writes
``topk_topp.json`` (or ``tune.json``), and ``topk_topp.png`` when matplotlib
is importable.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable

import torch

from benchmarks.harness import Area, Candidate, TokenCheck
from benchmarks.report import Plot
from benchmarks.tuning import print_ranking, run_sweep
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


def cases(args):
    for vocab_size in args.vocab_sizes:
        for num_rows in args.batch_sizes:
            yield (
                {"B": num_rows, "V": vocab_size},
                make_case(num_rows, vocab_size, args.top_k, args.top_p, args.logit_scale),
            )


def fused_topk_topp(use_fp64: bool = False, tuning: TopKTopPTuning = DEFAULT_TUNING) -> Callable:
    """A candidate's factory: turns a case with the attributes of ``Case``
    (``benchmarks/sampler.py``'s has them) into the zero-argument call to time."""

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


def logits_bytes(case: Case) -> int:
    return case.logits.numel() * case.logits.element_size()


PATH_NAMES = ("no_filter", "short_list", "collected", "exact")


def count_fused_paths(case: Case, row: dict, tokens: dict) -> None:
    """``row["fused_paths"]``: how many rows each step of the merge decided."""
    if "fused_fp32_us" not in row:
        return
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
    row["fused_paths"] = dict(zip(PATH_NAMES, counts))


def tuning_grid() -> list[TopKTopPTuning]:
    grid = itertools.product((2048, 4096, 8192), (64, 128, 256), (2, 4), (128,), (4, 8, 16))
    return [
        dataclasses.replace(
            DEFAULT_TUNING, chunk=c, group=g, per_group=n, short_list=s, num_warps=w
        )
        for c, g, n, s, w in grid
    ]


def tune(args, timers) -> dict:
    """Sweep ``tuning_grid`` for ``fused_fp32``, counting the tokens that
    differ from the default shape's."""
    sweep_cases = (
        (f"B={b}", make_case(b, args.tune_vocab_size, args.top_k, args.top_p, args.logit_scale))
        for b in args.batch_sizes
    )
    sweep = run_sweep(
        sweep_cases,
        tuning_grid(),
        lambda case, setting: fused_topk_topp(
            tuning=DEFAULT_TUNING if setting is None else setting
        )(case),
        rep_ms=40,
        exact=False,
        timer=timers.device,
    )
    print_ranking(
        sweep,
        DEFAULT_TUNING,
        f"V={args.tune_vocab_size}, us at B={args.batch_sizes} (tokens differing from the default)",
        mark="default",
    )
    return {
        "batch_sizes": args.batch_sizes,
        "vocab_size": args.tune_vocab_size,
        **sweep.report(DEFAULT_TUNING, current_key="default"),
    }


def add_arguments(parser) -> None:
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
    parser.add_argument("--tune-vocab-size", type=int, default=151936)


AREA = Area(
    name="topk_topp",
    description=__doc__.split("\n")[0],
    keys=("B", "V"),
    # FlashInfer draws from its own generator: its tokens differ from run to run.
    candidates={
        "fused_fp32": Candidate(
            fused_topk_topp(use_fp64=False),
            tokens=True,
            graph_replay=True,
            profile="fused_kernels_us",
        ),
        "fused_fp64": Candidate(fused_topk_topp(use_fp64=True), tokens=True),
        "fused_fp32_one_seed": Candidate(one_seed(fused_topk_topp(use_fp64=False)), tokens=True),
        "masked_plugin_gumbel": Candidate(masked_plugin_gumbel, tokens=True),
        "flashinfer": Candidate(flashinfer),
        "vllm_pytorch_gumbel": Candidate(vllm_pytorch_gumbel, tokens=True),
        "logits_copy": Candidate(logits_copy),
    },
    cases=cases,
    bytes_read=logits_bytes,
    checks=(TokenCheck("fused_matches_masked", "fused_fp32", "masked_plugin_gumbel"),),
    annotate=count_fused_paths,
    plot=Plot(
        title="top-k {top_k} / top-p {top_p} sampling, median ({gpu})",
        x="B",
        xlabel="batch B",
        panel_title="V={V}",
        columns="V",
    ),
    add_arguments=add_arguments,
    settings=lambda args: {
        "top_k": args.top_k,
        "top_p": args.top_p,
        "logit_scale": args.logit_scale,
        "tuning": dataclasses.asdict(DEFAULT_TUNING),
    },
    table_columns=(
        "fused_fp32",
        "fused_fp64",
        "fused_fp32_one_seed",
        "flashinfer",
        "vllm_pytorch_gumbel",
        "masked_plugin_gumbel",
        "logits_copy",
    ),
    details=("fused_fp32_graph_us", "fused_paths", "fused_kernels_us"),
    tune=tune,
)
main = AREA.main

if __name__ == "__main__":
    raise SystemExit(main())
