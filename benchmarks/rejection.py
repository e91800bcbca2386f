"""Latency of one rejection-sampling step: the plugin's fused kernel against stock vLLM 0.20.

    python3 -m benchmarks.rejection --out bench-results/rejection
    python3 -m benchmarks.rejection --tune --out bench-results/rejection-tune

For B requests with K drafts each and V logits (float32, or bfloat16 with
``--logits-dtype bfloat16``: the raw logits vLLM 0.33 hands the plugin's
verification; the stock columns are 0.20's and take float32), on the V2 runner's
packed layout (``B * (K + 1)`` target rows, Eagle-style ``[B, K, V]`` draft
logits equal to the target logits plus ``--draft-noise`` Gaussian noise, drafts
drawn from the draft distribution, temperature ``--temperature``), it times
(``triton.testing.do_bench`` median, L2 flushed before every call):

* ``plugin_fp32`` / ``plugin_fp64``: ``ops.rejection_sample_packed`` in
  standard mode, as the plugin's RejectionSampler calls it;
* ``plugin_synthetic``: the same call in synthetic mode, with the per-position
  acceptance that ``plugin_fp32`` measured on this case as its rates, so both
  accept equally often and the columns compare like with like;
* ``plugin_fp32_point``: standard mode without draft logits (n-gram drafts);
* ``plugin_fp32_topk_topp``: ``plugin_fp32`` with top_k=50 and top_p=0.9
  folded in (the per-row threshold pass, then the masked kernels), on the
  same logits read as raw ones (``apply_temperature=True``);
  ``filter_cost`` = plugin_fp32_topk_topp / plugin_fp32. Against upstream
  0.33's canvas-and-filters path: ``bench upstream --parts verify_filtered``;
* ``stock_probabilistic``: vLLM 0.20's ``probabilistic_rejection_sample`` on
  the same tensors;
* ``stock_synthetic``: what vLLM 0.20's synthetic method runs after the
  sampling parameters are applied: the Sampler's ``gumbel_sample`` over every
  logit, then ``synthetic_rejection_sample`` with the same rates.

Every path first needs ``Sampler.apply_sampling_params`` (an FP32 copy of the
logits plus penalties etc.), stock and plugin alike, so it is not timed.
``<name>_pct_copy_bw`` is the bytes of the target and draft logits (read once)
per second, as a share of a device-to-device copy measured in the same run;
the plugin reads no row past a request's first rejection, so it can exceed
what one full read would allow. ``speedup`` = stock_probabilistic /
plugin_fp32, ``synthetic_over_standard`` = plugin_synthetic / plugin_fp32.
Writes ``rejection.json``, and ``rejection.png`` when matplotlib is importable.

``--tune`` instead sweeps the launch parameters (``tuning_grid``) of
``ops.rejection.TUNING`` for standard mode with draft logits, per
precision, over the same B and K at ``--vocab-size``; checks that every
setting returns exactly the default's tokens; prints the fastest settings
(lowest geometric mean of time / fastest time over the cases) as lines to
paste into ``TUNING``; and writes ``tune.json``.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable

import torch

from benchmarks.harness import Area, Candidate, Ratio
from benchmarks.report import Plot
from benchmarks.tuning import (
    fastest_per_case,
    print_ranking,
    run_sweep,
    tuning_by_precision,
)
from vllm_sampling_plugin.ops.rejection import (
    TUNING,
    RejectionTuning,
    rejection_sample_packed,
    unconditional_to_conditional_rates,
)


@dataclasses.dataclass
class Case:
    """One benchmark point: the tensors vLLM 0.20's RejectionSampler holds."""

    num_spec: int
    target_logits: torch.Tensor  # [B * (K + 1), V] --logits-dtype, processed
    draft_logits: torch.Tensor  # [B, K, V] --logits-dtype
    draft_sampled: torch.Tensor  # [B * (K + 1)] int32: input_ids[logits_indices]
    cu_num_logits: torch.Tensor  # [B + 1] int32
    idx_mapping: torch.Tensor  # [B] int32
    expanded_idx_mapping: torch.Tensor  # [B * (K + 1)] int32
    expanded_local_pos: torch.Tensor  # [B * (K + 1)] int32
    pos: torch.Tensor  # [B * (K + 1)] int64
    temperature: torch.Tensor  # [B] fp32
    seeds: torch.Tensor  # [B] int64
    # [K] fp32, filled in from plugin_fp32's measured acceptance
    conditional_rates: torch.Tensor | None = None


def make_case(num_reqs: int, num_spec: int, vocab_size: int, args) -> Case:
    gen = torch.Generator(device="cuda").manual_seed(num_reqs * 131 + num_spec)
    num_logits = num_reqs * (num_spec + 1)
    target_logits = (
        torch.randn(num_logits, vocab_size, generator=gen, device="cuda") * args.logit_scale
    )
    rows = target_logits.view(num_reqs, num_spec + 1, vocab_size)[:, :num_spec]
    draft_logits = rows + args.draft_noise * torch.randn(rows.shape, generator=gen, device="cuda")
    # Drafts drawn from the draft distribution (Gumbel-max), as Eagle draws them.
    uniform = torch.rand(draft_logits.shape, generator=gen, device="cuda").clamp_(min=1e-20)
    drafts = (draft_logits / args.temperature - (-uniform.log()).log()).argmax(-1)
    del uniform
    draft_sampled = torch.zeros(num_reqs, num_spec + 1, dtype=torch.int32, device="cuda")
    draft_sampled[:, 1:] = drafts
    idx_mapping = torch.arange(num_reqs, dtype=torch.int32, device="cuda")
    start_pos = torch.randint(0, 1 << 14, (num_reqs, 1), generator=gen, device="cuda")
    dtype = LOGITS_DTYPES[args.logits_dtype]
    return Case(
        num_spec=num_spec,
        target_logits=target_logits.to(dtype),
        draft_logits=draft_logits.to(dtype).contiguous(),
        draft_sampled=draft_sampled.view(-1),
        cu_num_logits=torch.arange(num_reqs + 1, dtype=torch.int32, device="cuda") * (num_spec + 1),
        idx_mapping=idx_mapping,
        expanded_idx_mapping=idx_mapping.repeat_interleave(num_spec + 1),
        expanded_local_pos=torch.arange(num_spec + 1, dtype=torch.int32, device="cuda").repeat(
            num_reqs
        ),
        pos=(start_pos + torch.arange(num_spec + 1, device="cuda")).view(-1),
        temperature=torch.full((num_reqs,), args.temperature, device="cuda"),
        seeds=torch.randint(-(2**63), 2**63 - 1, (num_reqs,), generator=gen, device="cuda"),
    )


FILTER_TOP_K, FILTER_TOP_P = 50, 0.9
# float32 as the processed canvas of 0.20; bfloat16 as the raw logits vLLM
# 0.33 hands the plugin's verification (and a draft model's cached logits).
LOGITS_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def plugin(
    use_fp64: bool = False,
    synthetic: bool = False,
    draft_logits: bool = True,
    tuning: RejectionTuning | None = None,
    filtered: bool = False,
) -> Callable:
    def make(case: Case):
        filters = {}
        if filtered:
            num_reqs = case.temperature.shape[0]
            filters = {
                "apply_temperature": True,
                "top_k": torch.full(
                    (num_reqs,), FILTER_TOP_K, dtype=torch.int32, device=case.temperature.device
                ),
                "top_p": torch.full(
                    (num_reqs,), FILTER_TOP_P, dtype=torch.float32, device=case.temperature.device
                ),
            }
        return lambda: rejection_sample_packed(
            case.target_logits,
            case.draft_sampled,
            case.cu_num_logits,
            idx_mapping=case.idx_mapping,
            pos=case.pos,
            temperature=case.temperature,
            seeds=case.seeds,
            num_speculative_steps=case.num_spec,
            draft_logits=case.draft_logits if draft_logits else None,
            synthetic_conditional_rates=case.conditional_rates if synthetic else None,
            use_fp64=use_fp64,
            tuning=tuning,
            **filters,
        )

    return make


def stock_probabilistic(case: Case):
    from vllm.v1.worker.gpu.spec_decode.probabilistic_rejection_sampler_utils import (
        probabilistic_rejection_sample,
    )

    return lambda: probabilistic_rejection_sample(
        case.target_logits,
        case.draft_logits,
        case.draft_sampled,
        case.cu_num_logits,
        case.pos,
        case.idx_mapping,
        case.expanded_idx_mapping,
        case.expanded_local_pos,
        case.temperature,
        case.seeds,
        case.num_spec,
    )


def stock_synthetic(case: Case):
    from vllm.v1.worker.gpu.sample.gumbel import gumbel_sample
    from vllm.v1.worker.gpu.spec_decode.synthetic_rejection_sampler_utils import (
        synthetic_rejection_sample,
    )

    def run():
        target_sampled = gumbel_sample(
            case.target_logits,
            case.expanded_idx_mapping,
            case.temperature,
            case.seeds,
            case.pos,
            apply_temperature=False,
        )
        return synthetic_rejection_sample(
            target_sampled,
            case.draft_sampled,
            case.cu_num_logits,
            case.pos,
            case.idx_mapping,
            case.seeds,
            case.conditional_rates,
            case.num_spec,
        )

    return run


def cases(args):
    for num_spec in args.num_spec:
        for num_reqs in args.batch_sizes:
            yield (
                {"B": num_reqs, "K": num_spec, "V": args.vocab_size},
                make_case(num_reqs, num_spec, args.vocab_size, args),
            )


def unconditional_acceptance(num_sampled: torch.Tensor, num_spec: int) -> list[float]:
    """Share of requests whose first i + 1 drafts were all accepted, per i."""
    accepted = (num_sampled - 1).float()
    return [float((accepted > i).float().mean()) for i in range(num_spec)]


def measure_acceptance(case: Case, row: dict) -> None:
    """The acceptance ``plugin_fp32`` reaches on ``case``, which synthetic
    mode is then asked to reproduce (``case.conditional_rates``)."""
    _, num_sampled = plugin()(case)()
    rates = unconditional_acceptance(num_sampled, case.num_spec)
    row["acceptance"] = rates
    row["mean_emitted"] = float(num_sampled.float().mean())
    case.conditional_rates = torch.tensor(
        unconditional_to_conditional_rates(rates), dtype=torch.float32, device="cuda"
    )
    _, synthetic_num_sampled = plugin(synthetic=True)(case)()
    row["synthetic_mean_emitted"] = float(synthetic_num_sampled.float().mean())


def logits_bytes(case: Case) -> int:
    """The target and draft logits, read once."""
    return (case.target_logits.numel() + case.draft_logits.numel()) * case.target_logits.element_size()


def tuning_grid(use_fp64: bool) -> list[RejectionTuning]:
    sample_chunks = (256, 512, 1024) if use_fp64 else (512, 1024, 2048)
    grid = itertools.product(
        (4096, 8192, 16384), (1024, 2048, 4096), sample_chunks, (4, 8), (4, 8, 16)
    )
    candidates = [
        RejectionTuning(max_block=b, chunk=c, sample_chunk=s, num_warps=w, programs_per_sm=p)
        for b, c, s, w, p in grid
        if c <= b and s <= b
    ]
    default = TUNING[use_fp64]
    return candidates + ([default] if default not in candidates else [])


def tune(args, timers) -> dict:
    """Sweep ``tuning_grid`` per precision on every (B, K); every setting must
    return the default's tokens."""
    report = {}
    for use_fp64 in (False, True):
        label = "fp64" if use_fp64 else "fp32"
        current = TUNING[use_fp64]
        pairs = [(b, k) for k in args.num_spec for b in args.batch_sizes]
        sweep_cases = (
            (f"{label} B={b} K={k}", make_case(b, k, args.vocab_size, args)) for b, k in pairs
        )
        sweep = run_sweep(
            sweep_cases,
            tuning_grid(use_fp64),
            lambda case, setting, use_fp64=use_fp64: plugin(use_fp64, tuning=setting)(case),
            rep_ms=args.tune_rep_ms,
            exact=True,
            timer=timers.device,
        )
        print_ranking(sweep, current, f"{label}: V={args.vocab_size}, us at (B, K) = {pairs}")
        print(
            f"best {label}, for TUNING in ops/rejection/plan.py:\n"
            f"    {use_fp64}: {sweep.ranked[0]},"
        )
        report[label] = {
            "cases": [{"B": b, "K": k} for b, k in pairs],
            "vocab_size": args.vocab_size,
            "fastest_us": fastest_per_case(sweep.times),
            **sweep.report(current),
        }
    return report


def add_arguments(parser) -> None:
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 64, 256])
    parser.add_argument(
        "--num-spec", type=int, nargs="+", default=[1, 3, 5], help="drafts per request (K)"
    )
    parser.add_argument("--vocab-size", type=int, default=151936)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument(
        "--logit-scale", type=float, default=3.0, help="target logits ~ N(0, scale^2)"
    )
    parser.add_argument(
        "--draft-noise",
        type=float,
        default=0.5,
        help="draft logits = target logits + N(0, noise^2); sets the acceptance rate",
    )
    parser.add_argument(
        "--logits-dtype",
        choices=list(LOGITS_DTYPES),
        default="float32",
        help="dtype of the target and draft logits",
    )
    parser.add_argument("--tune-rep-ms", type=int, default=25, help="do_bench rep per setting")


AREA = Area(
    name="rejection",
    description=__doc__.split("\n")[0],
    keys=("B", "K"),
    # Every column returns (sampled tokens, count per request).
    candidates={
        "plugin_fp32": Candidate(plugin(), tokens=True),
        "plugin_fp64": Candidate(plugin(use_fp64=True), tokens=True),
        "plugin_synthetic": Candidate(plugin(synthetic=True), tokens=True),
        "plugin_fp32_point": Candidate(plugin(draft_logits=False), tokens=True),
        "plugin_fp32_topk_topp": Candidate(plugin(filtered=True), tokens=True),
        "stock_probabilistic": Candidate(stock_probabilistic, tokens=True),
        "stock_synthetic": Candidate(stock_synthetic, tokens=True),
    },
    cases=cases,
    bytes_read=logits_bytes,
    prepare=measure_acceptance,
    ratios=(
        Ratio("speedup", "stock_probabilistic", "plugin_fp32"),
        Ratio("synthetic_over_standard", "plugin_synthetic", "plugin_fp32"),
        Ratio("filter_cost", "plugin_fp32_topk_topp", "plugin_fp32"),
    ),
    plot=Plot(
        title="Rejection sampling step, median ({gpu})",
        x="B",
        xlabel="requests B",
        panel_title="K={K}, V={V}",
        columns="K",
    ),
    add_arguments=add_arguments,
    settings=lambda args: {
        "tuning": tuning_by_precision(TUNING),
        "temperature": args.temperature,
        "logit_scale": args.logit_scale,
        "draft_noise": args.draft_noise,
        "logits_dtype": args.logits_dtype,
    },
    table_columns=(
        "plugin_fp32",
        "plugin_fp64",
        "plugin_synthetic",
        "stock_probabilistic",
        "stock_synthetic",
    ),
    details=("mean_emitted", "synthetic_mean_emitted"),
    tune=tune,
)
main = AREA.main

if __name__ == "__main__":
    raise SystemExit(main())
