"""Which parts of sampling the plugin takes over on each vLLM release line.

This table is the single source for the ``vllm-sampling-plugin info`` output,
the log line of ``register()`` and docs/compatibility.md
(``vllm-sampling-plugin info --markdown`` renders it). It imports nothing
from vLLM so ``info`` can print it for any installed release.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from vllm_sampling_plugin.integration.version import LINE_0_20, LINE_0_32, LINE_0_33


class Owner(enum.Enum):
    PLUGIN = "plugin"
    UPSTREAM = "upstream"


# The parts, in the order a decode step reaches them.
ALLOWED_BIAS_MIN_TOKENS = "allowed ids, logit bias, min-tokens masking"
GUMBEL = "Gumbel-max sampling (no top-k/top-p)"
TOP_K_TOP_P_SEEDED = "top-k/top-p, batches FlashInfer may not take"
TOP_K_TOP_P_FLASHINFER = "top-k/top-p, batches FlashInfer may take"
REJECTION = "rejection sampling"
NGRAM = "n-gram speculator"
FP64_SETTING = "use_fp64_gumbel setting"
FLASHINFER_SETTING = "VLLM_USE_FLASHINFER_SAMPLER"
PARTS = (
    ALLOWED_BIAS_MIN_TOKENS,
    GUMBEL,
    TOP_K_TOP_P_SEEDED,
    TOP_K_TOP_P_FLASHINFER,
    REJECTION,
    NGRAM,
    FP64_SETTING,
    FLASHINFER_SETTING,
)


@dataclass(frozen=True)
class PartChoice:
    owner: Owner
    why: str
    # Plugin time against upstream's on the same GPU, or why there is none.
    ratio: str


# Where upstream would call FlashInfer (no greedy row, no explicit seed).
_FLASHINFER_BATCHES_WHY = (
    "with VLLM_USE_FLASHINFER_SAMPLER unset the plugin's fused kernel draws "
    "them, as on 0.20 (the same law, drawn faster); "
    "VLLM_USE_FLASHINFER_SAMPLER=1 keeps them FlashInfer's"
)

_BENCH = "docs/benchmarks.md, H100"
_BENCH_0_32 = "bench upstream, H100, docs/benchmarks.md"
_BENCH_0_33 = "bench upstream and bench e2e, H100, docs/benchmarks.md"

# Where upstream's bias kernel has its barriers (0.25 and later).
_BIAS_KERNEL_WITH_BARRIERS_WHY = (
    "upstream's bias kernel has barriers around its -inf overwrite of the row "
    "(added in 0.25), so allowed ids are kept; writes the barriers do not "
    "order remain (a token both allowed and biased, a biased or allowed stop "
    "token under min_tokens; docs/troubleshooting.md) and the plugin does not "
    "own this processing step on these lines"
)

LINE_PARTS: dict[str, dict[str, PartChoice]] = {
    LINE_0_20: {
        ALLOWED_BIAS_MIN_TOKENS: PartChoice(
            Owner.PLUGIN,
            "upstream's bias kernel saves the allowed logits, stores -inf over "
            "the row and restores them with no barrier between threads, so the "
            "row can end all -inf and every token be id 0 (issue 27); the "
            "plugin's kernel decides each logit in one thread, for the sampler "
            "and for speculative verification; min_tokens masks stop ids for "
            "exactly min_tokens outputs (upstream 0.20: one more)",
            "not timed; one launch over rows x vocabulary blocks, rows that use "
            "none of the three return at once",
        ),
        GUMBEL: PartChoice(
            Owner.PLUGIN,
            "upstream draws FP64 noise only; the plugin adds FP32 noise",
            f"FP32 5.7x faster than upstream FP64 at B=1024; FP64 on par ({_BENCH})",
        ),
        TOP_K_TOP_P_SEEDED: PartChoice(
            Owner.PLUGIN,
            "upstream sorts, masks, then samples; the plugin's fused kernel is "
            "seeded and batch-invariant",
            f"5.5-5.8x faster than FlashInfer at B=64-1024 ({_BENCH})",
        ),
        TOP_K_TOP_P_FLASHINFER: PartChoice(
            Owner.PLUGIN,
            "FlashInfer when selected, else the plugin's fused kernel; the "
            "plugin routes the batch",
            "FlashInfer's own kernel where it runs",
        ),
        REJECTION: PartChoice(
            Owner.PLUGIN,
            "one fused kernel for strict, probabilistic and synthetic",
            f"1.71x upstream probabilistic at B=256, K=3 ({_BENCH})",
        ),
        NGRAM: PartChoice(
            Owner.PLUGIN,
            "upstream's V2 runner has no n-gram speculator",
            f"no upstream counterpart; 37.7 us at R=256, L=8192, k=5 ({_BENCH})",
        ),
        FP64_SETTING: PartChoice(
            Owner.PLUGIN,
            "upstream has no such setting; the plugin adds --use-fp64-gumbel",
            "n/a",
        ),
        FLASHINFER_SETTING: PartChoice(
            Owner.PLUGIN,
            "read once in the front-end, tri-state (1 forces, 0 off, unset "
            "where supported), carried to workers on ModelConfig",
            "n/a",
        ),
    },
    LINE_0_32: {
        ALLOWED_BIAS_MIN_TOKENS: PartChoice(Owner.UPSTREAM, _BIAS_KERNEL_WITH_BARRIERS_WHY, "n/a"),
        GUMBEL: PartChoice(
            Owner.PLUGIN,
            "same algorithm (Gumbel-max, counter-based noise); FP64 draws "
            "upstream's own murmur3 noise, so --use-fp64-gumbel gives upstream's "
            "tokens, and so does FP32 on engines that speculate (upstream's "
            "RejectionSampler draws their steps with drafts); the plugin must "
            "own it whenever it owns the seeded "
            "top-k/top-p draw, or a seeded request's noise would depend on its "
            "batch-mates",
            "upstream/plugin time: FP32 1.9-2.3x at B=256-1024, 0.96-1.69x at "
            "B=64 (launch-bound, spread up to 36%, two runs); FP64 1.07-1.11x, "
            f"1.00x at B=64, V=128256 ({_BENCH_0_32})",
        ),
        TOP_K_TOP_P_SEEDED: PartChoice(
            Owner.PLUGIN,
            "upstream falls back to mask-then-sample for greedy rows and "
            "explicit seeds; the plugin's fused kernel is seeded and "
            "batch-invariant",
            f"4.4-6.2x faster than upstream's, FP32 and FP64, B=64-1024 ({_BENCH_0_32})",
        ),
        TOP_K_TOP_P_FLASHINFER: PartChoice(
            Owner.PLUGIN,
            _FLASHINFER_BATCHES_WHY,
            "FlashInfer 0.7.0.post1 takes 5.9-6.2x the plugin's fused kernel's "
            f"time, B=64-1024 ({_BENCH_0_32})",
        ),
        REJECTION: PartChoice(
            Owner.UPSTREAM,
            "upstream has one fused kernel plus adaptive verification and "
            "watermark keys the plugin's kernel does not handle",
            f"the plugin's kernel 1.03-1.24x faster, K=3, B=64-256 ({_BENCH_0_32})",
        ),
        NGRAM: PartChoice(
            Owner.UPSTREAM,
            "upstream has its own GPU n-gram proposer; the plugin reads how many "
            "drafts it found, for the adaptive speculation policy (opt-in here, "
            "--speculation-policy adaptive; not yet run on a GPU)",
            f"the plugin's kernel 1.22x faster, R=256, L=8192, k=3-5 ({_BENCH_0_32})",
        ),
        FP64_SETTING: PartChoice(
            Owner.UPSTREAM,
            "upstream's ModelConfig.use_fp64_gumbel (--use-fp64-gumbel), read "
            "by the plugin's sampler",
            "n/a",
        ),
        FLASHINFER_SETTING: PartChoice(
            Owner.UPSTREAM,
            "upstream's variable and support check (flashinfer_sampler_supported); "
            "the plugin reads only whether it is set: unset, it takes FlashInfer's "
            "batches; 1 keeps them FlashInfer's",
            "n/a",
        ),
    },
    LINE_0_33: {
        ALLOWED_BIAS_MIN_TOKENS: PartChoice(Owner.UPSTREAM, _BIAS_KERNEL_WITH_BARRIERS_WHY, "n/a"),
        GUMBEL: PartChoice(
            Owner.PLUGIN,
            "upstream's gumbel_sample is still Gumbel-max with counter-based "
            "noise (sample/gumbel.py; its FP64 murmur3 noise is 0.32's, which "
            "the plugin draws, as its FP32 noise on engines that speculate); "
            "the plugin must own it whenever it owns "
            "the seeded top-k/top-p draw, or a seeded request's noise would "
            "depend on its batch-mates",
            f"upstream/plugin time: FP32 1.70-2.35x, FP64 1.06-1.12x, B=64-1024 ({_BENCH_0_33})",
        ),
        TOP_K_TOP_P_SEEDED: PartChoice(
            Owner.PLUGIN,
            "upstream still falls back to mask-then-sample for greedy rows and "
            "explicit seeds (sample/sampler.py:307-315); the plugin's fused "
            "kernel is seeded and batch-invariant",
            f"upstream/plugin time: FP32 2.04-4.70x, FP64 1.71-5.40x, B=64-1024 ({_BENCH_0_33})",
        ),
        TOP_K_TOP_P_FLASHINFER: PartChoice(
            Owner.PLUGIN,
            _FLASHINFER_BATCHES_WHY,
            "FlashInfer 0.7.2.post1 takes 1.6-6.4x the fused kernel's time, B=64-1024; "
            f"8B engine tok/s plugin/stock 1.028 at B=64, 1.008 at B=256 ({_BENCH_0_33})",
        ),
        REJECTION: PartChoice(
            Owner.UPSTREAM,
            "upstream keeps its fused kernel with adaptive verification and "
            "watermark keys the plugin's kernel does not handle",
            f"the plugin's kernel 0.67-1.52x upstream's, K=3, B=64-256, one noisy run ({_BENCH_0_33})",
        ),
        NGRAM: PartChoice(
            Owner.UPSTREAM,
            "upstream has its own GPU n-gram proposer (spec_decode/ngram/); the "
            "plugin reads how many drafts it found, for the adaptive speculation policy "
            "(opt-in here, --speculation-policy adaptive; not yet run on a GPU)",
            f"the plugin's kernel 0.55-0.76x upstream's, R=256, L=8192, one noisy run ({_BENCH_0_33})",
        ),
        FP64_SETTING: PartChoice(
            Owner.UPSTREAM,
            "upstream's ModelConfig.use_fp64_gumbel (--use-fp64-gumbel), passed "
            "by the runner to the plugin's sampler (model_runner.py:489)",
            "n/a",
        ),
        FLASHINFER_SETTING: PartChoice(
            Owner.UPSTREAM,
            "upstream's variable and support check (flashinfer_sampler_supported); "
            "the plugin reads only whether it is set: unset, it takes FlashInfer's "
            "batches; 1 keeps them FlashInfer's",
            "n/a",
        ),
    },
}


def parts_summary(line: str) -> str:
    """One line for the log: which parts are the plugin's on ``line``."""
    table = LINE_PARTS[line]
    mine = [part for part in PARTS if table[part].owner is Owner.PLUGIN]
    theirs = [part for part in PARTS if table[part].owner is Owner.UPSTREAM]
    return f"plugin: {', '.join(mine)}; upstream: {', '.join(theirs) or 'nothing'}"


def parts_rows(line: str) -> list[tuple[str, str, str, str]]:
    """``(part, owner, why, ratio)`` for every part on ``line``."""
    table = LINE_PARTS[line]
    return [(p, table[p].owner.value, table[p].why, table[p].ratio) for p in PARTS]


def compatibility_markdown() -> str:
    """The release x part table of docs/compatibility.md."""
    lines = sorted(LINE_PARTS, key=lambda line: tuple(map(int, line.split("."))))
    out = ["| part | " + " | ".join(f"vLLM {line}.x" for line in lines) + " |"]
    out.append("|---" * (len(lines) + 1) + "|")
    for part in PARTS:
        cells = [
            f"{LINE_PARTS[line][part].owner.value} ({LINE_PARTS[line][part].ratio})"
            for line in lines
        ]
        out.append(f"| {part} | " + " | ".join(cells) + " |")
    out.append("")
    for line in lines:
        out.append(f"Why, on vLLM {line}.x:")
        out.append("")
        for part, owner, why, _ in parts_rows(line):
            out.append(f"- {part} ({owner}): {why}.")
        out.append("")
    return "\n".join(out)
