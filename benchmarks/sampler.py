"""Latency of one sampling step: the plugin's Gumbel-max against stock vLLM 0.20 and FlashInfer.

    python3 -m benchmarks.sampler --out bench-results/sampler
    python3 -m benchmarks.sampler --tune --out bench-results/sampler-tune

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
``--tune`` sweeps ``ops.gumbel.TUNING`` instead and prints the fastest
settings per precision (the tokens must not change with them; that is
checked too). Writes ``sampler.json`` (or ``tune.json``), and
``sampler.png`` when matplotlib is importable.
"""

from __future__ import annotations

import dataclasses
import itertools

import torch

from benchmarks.harness import Area, Candidate, TokenCheck
from benchmarks.report import Plot
from benchmarks.topk_topp import fused_topk_topp
from benchmarks.tuning import print_ranking, run_sweep, tuning_by_precision
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
        seeds=torch.randint(-(2**63), 2**63 - 1, (num_rows,), generator=gen, device="cuda"),
        pos=torch.randint(0, 1 << 16, (num_rows,), generator=gen, device="cuda"),
        top_k=torch.full((num_rows,), TOP_K, dtype=torch.int32, device="cuda"),
        top_p=torch.full((num_rows,), TOP_P, dtype=torch.float32, device="cuda"),
        apply_temperature=apply_temperature,
    )


def cases(args):
    for vocab_size in args.vocab_sizes:
        for num_rows in args.batch_sizes:
            yield (
                {"B": num_rows, "V": vocab_size},
                make_case(num_rows, vocab_size, args.apply_temperature),
            )


def plugin(use_fp64: bool):
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


def vllm_masking(function_name: str):
    def make(case: Case):
        from vllm.v1.sample.ops import topk_topp_sampler

        mask = getattr(topk_topp_sampler, function_name)
        work = torch.empty_like(case.logits)
        return lambda: mask(work.copy_(case.logits), case.top_k, case.top_p)

    return make


def logits_copy(case: Case):
    work = torch.empty_like(case.logits)
    return lambda: work.copy_(case.logits)


def logits_bytes(case: Case) -> int:
    return case.logits.numel() * case.logits.element_size()


def tuning_grid(use_fp64: bool) -> list[GumbelTuning]:
    tiles = (512, 1024, 2048) if use_fp64 else (1024, 2048, 4096)
    grid = itertools.product(tiles, (2, 4, 8), (4, 8), (1, 2), (2, 4, 8))
    return [
        GumbelTuning(tile=t, max_tiles_per_chunk=c, num_warps=w, num_stages=s, programs_per_sm=p)
        for t, c, w, s, p in grid
    ]


def tune(args, timers) -> dict:
    """Sweep ``tuning_grid`` per precision (``ops.gumbel.TUNING`` is global, so
    each setting is installed there for its calls and the default restored)."""
    report = {}
    for use_fp64 in (False, True):
        label = "fp64" if use_fp64 else "fp32"
        current = gumbel.TUNING[use_fp64]

        def call_with(case, setting, use_fp64=use_fp64, current=current):
            gumbel.TUNING[use_fp64] = current if setting is None else setting
            return plugin(use_fp64)(case)

        sweep_cases = (
            (f"{label} B={b}", make_case(b, args.tune_vocab_size, args.apply_temperature))
            for b in args.batch_sizes
        )
        try:
            sweep = run_sweep(
                sweep_cases,
                tuning_grid(use_fp64),
                call_with,
                rep_ms=40,
                exact=True,
                timer=timers.device,
            )
        finally:
            gumbel.TUNING[use_fp64] = current
        print_ranking(
            sweep, current, f"{label}: V={args.tune_vocab_size}, us at B={args.batch_sizes}"
        )
        report[label] = {
            "batch_sizes": args.batch_sizes,
            "vocab_size": args.tune_vocab_size,
            **sweep.report(current),
        }
    return report


def add_arguments(parser) -> None:
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 64, 256, 1024])
    parser.add_argument("--vocab-sizes", type=int, nargs="+", default=[32000, 128256, 151936])
    parser.add_argument(
        "--apply-temperature",
        action="store_true",
        help="divide by the temperature inside the Gumbel kernels (the runner "
        "applies it beforehand, so the default is not to)",
    )
    parser.add_argument("--tune-vocab-size", type=int, default=151936)


AREA = Area(
    name="sampler",
    description=__doc__.split("\n")[0],
    keys=("B", "V"),
    # FlashInfer draws from its own generator: its tokens differ from run to run.
    candidates={
        "plugin_fp32": Candidate(plugin(use_fp64=False), tokens=True),
        "plugin_fp64": Candidate(plugin(use_fp64=True), tokens=True),
        "stock_gumbel": Candidate(stock_gumbel, tokens=True),
        "fused_topk_topp": Candidate(fused_topk_topp(use_fp64=False), tokens=True),
        "flashinfer_topk_topp": Candidate(flashinfer_topk_topp),
        "vllm_topk_topp_pytorch": Candidate(vllm_masking("apply_top_k_top_p_pytorch")),
        "vllm_topk_topp": Candidate(vllm_masking("apply_top_k_top_p")),
        "logits_copy": Candidate(logits_copy),
    },
    cases=cases,
    bytes_read=logits_bytes,
    checks=(TokenCheck("fp64_matches_stock", "plugin_fp64", "stock_gumbel"),),
    plot=Plot(
        title="Sampling step latency, median ({gpu})",
        x="B",
        xlabel="batch B",
        panel_title="V={V}",
        columns="V",
    ),
    add_arguments=add_arguments,
    settings=lambda args: {
        "apply_temperature": args.apply_temperature,
        "tuning": tuning_by_precision(gumbel.TUNING),
        "top_k": TOP_K,
        "top_p": TOP_P,
    },
    tune=tune,
)
main = AREA.main

if __name__ == "__main__":
    raise SystemExit(main())
