"""Which parts of sampling the plugin takes, why, and what was measured.

A part belongs to one seam (integration/seams/): the plugin owns it where
that seam's adapter finds a shape it knows. The owners therefore come from
detection (in a running vLLM) or from ``LINE_SEAMS`` (for every line, in
docs/compatibility.md); the ratios come from data/measurements.json
(vllm_sampling_plugin/measurements.py). Imports nothing from vLLM, so
``info`` can print it for any installed release.
"""

from __future__ import annotations

import enum
import typing

from vllm_sampling_plugin import config as cfg
from vllm_sampling_plugin import measurements
from vllm_sampling_plugin.integration.settings.defaults import defaults
from vllm_sampling_plugin.integration.common import shapes
from vllm_sampling_plugin.integration.common.found import Found, shapes_of
from vllm_sampling_plugin.integration.version import LINE_SEAMS


class Owner(enum.Enum):
    PLUGIN = "plugin"
    UPSTREAM = "upstream"
    # Upstream's unless the engine opts in (a setting of SETTING_PARTS whose
    # default on the line is upstream's).
    OPT_IN = "upstream (plugin opt-in)"


# The whole engine's gain on a line (data/measurements.json), beside the parts'.
END_TO_END = "end to end"

# The parts, in the order a decode step reaches them.
ALLOWED_BIAS_MIN_TOKENS = "allowed ids, logit bias, min-tokens masking"
GUMBEL = "Gumbel-max sampling (no top-k/top-p)"
TOP_K_TOP_P_SEEDED = "top-k/top-p, batches FlashInfer may not take"
TOP_K_TOP_P_FLASHINFER = "top-k/top-p, batches FlashInfer may take"
REJECTION = "rejection sampling"
VERIFICATION = "speculative verification owner"
NGRAM = "n-gram speculator"
SPECULATION_POLICY = "adaptive speculation policy"
FP64_SETTING = "use_fp64_gumbel setting"
FLASHINFER_SETTING = "VLLM_USE_FLASHINFER_SAMPLER"
PARTS = (
    ALLOWED_BIAS_MIN_TOKENS,
    GUMBEL,
    TOP_K_TOP_P_SEEDED,
    TOP_K_TOP_P_FLASHINFER,
    REJECTION,
    VERIFICATION,
    NGRAM,
    SPECULATION_POLICY,
    FP64_SETTING,
    FLASHINFER_SETTING,
)

SEAM_OF_PART = {
    ALLOWED_BIAS_MIN_TOKENS: shapes.DRAW,
    GUMBEL: shapes.DRAW,
    TOP_K_TOP_P_SEEDED: shapes.DRAW,
    TOP_K_TOP_P_FLASHINFER: shapes.DRAW,
    REJECTION: shapes.REJECTION,
    VERIFICATION: shapes.REJECTION,
    NGRAM: shapes.SPECULATOR,
    SPECULATION_POLICY: shapes.SPECULATOR,
    FP64_SETTING: shapes.SETTINGS,
    FLASHINFER_SETTING: shapes.SETTINGS,
}

# Parts the plugin takes only in some of their seam's shapes: the race-free
# bias step comes with the plugin's own Sampler (integration/draw/sample.py,
# logit_bias.py), which the sample() shape uses; the other shapes keep
# upstream's processing. The n-gram proposer is the plugin's only where
# upstream has none; over upstream's the plugin adds the policy alone.
PART_SHAPES = {
    ALLOWED_BIAS_MIN_TOKENS: (shapes.SAMPLE,),
    NGRAM: (shapes.NGRAM_BEFORE_REQUEST_STATE,),
    REJECTION: (shapes.STRICT_PROBABILISTIC_SYNTHETIC,),
    VERIFICATION: (shapes.STRICT_PROBABILISTIC_SYNTHETIC,),
}

class Setting(typing.NamedTuple):
    """A setting that gives a part to the plugin or leaves it upstream's, per
    engine, in the seam shapes that offer the choice."""

    shapes: tuple[str, ...]
    attr: str  # on ModelConfig, and the key of integration/settings/defaults.py's answer
    flag: str
    plugin_value: str
    upstream_value: str


_VERIFICATION_SETTING = Setting(shapes.VERIFY_STEPS, cfg.VERIFICATION_ATTR,
                                "--plugin-verification", cfg.PLUGIN, cfg.UPSTREAM)
# Which value an engine that names none gets is the shape's (integration/settings/defaults.py).
SETTING_PARTS = {
    VERIFICATION: _VERIFICATION_SETTING,
    REJECTION: _VERIFICATION_SETTING,
    SPECULATION_POLICY: Setting(
        (shapes.NGRAM_BEFORE_REQUEST_STATE, *shapes.POLICY_OVER_UPSTREAM),
        cfg.SPECULATION_POLICY_ATTR, "--speculation-policy", cfg.ADAPTIVE, cfg.FIXED),
}

# Why the plugin takes a part where its seam has a known shape.
WHY_PLUGIN = {
    ALLOWED_BIAS_MIN_TOKENS: "upstream's bias kernel (until 0.25) saves the allowed "
    "logits, stores -inf over the row and restores them with no barrier between "
    "threads, so the row can end all -inf and every token be id 0 (docs/troubleshooting.md); the "
    "plugin's kernel decides each logit in one thread, for the sampler and for "
    "speculative verification; min_tokens masks stop ids for exactly min_tokens "
    "outputs (upstream 0.20: one more)",
    GUMBEL: "the plugin's Gumbel-max kernel (FP64 in upstream's noise stream: Philox "
    "through 0.30, murmur3 from 0.31; FP32 in upstream's murmur3 stream on engines "
    "that speculate from 0.31, where upstream's RejectionSampler draws the steps with "
    "drafts; on 0.21-0.30, whose FP32 rejection noise the plugin lacks, an engine that "
    "speculates in FP32 keeps upstream's Sampler); it must own this draw whenever it owns the seeded top-k/top-p draw, or "
    "a seeded request's noise would depend on its batch-mates",
    TOP_K_TOP_P_SEEDED: "upstream sorts, masks, then samples; the plugin's fused "
    "kernel is seeded and batch-invariant",
    TOP_K_TOP_P_FLASHINFER: "with VLLM_USE_FLASHINFER_SAMPLER unset the plugin's fused "
    "kernel draws them (the same law, drawn faster); =1 keeps them FlashInfer's",
    REJECTION: "one fused kernel for strict, probabilistic and synthetic; n-gram drafts "
    "verified by matching the sampler's own draws",
    VERIFICATION: "the plugin's RejectionSampler verifies every draft (0.20's methods)",
    NGRAM: "upstream's V2 runner has no n-gram speculator; the plugin's GPU proposer",
    SPECULATION_POLICY: "the scheduler verifies only the drafts the n-gram proposer "
    "found (counts sent back with each output, no sync; full decode graphs for "
    "one-token steps), so text that does not repeat costs little; the default where "
    "engine runs measured it (integration/defaults.py); --speculation-policy fixed "
    "verifies k drafts for every request every step, as vLLM does",
    FP64_SETTING: "upstream has no such setting; the plugin adds --use-fp64-gumbel",
    FLASHINFER_SETTING: "read once in the front-end, carried to workers on ModelConfig; "
    + cfg.FLASHINFER_VALUES,
}

# Why a seam stays upstream's on a line where the plugin knows that (the
# docs' table; a running plugin says what its adapter found instead).
WHY_UPSTREAM = {
    shapes.SETTINGS: "upstream's ModelConfig.use_fp64_gumbel and its "
    "VLLM_USE_FLASHINFER_SAMPLER handling, read by the plugin's sampler",
    shapes.DRAW: "the Sampler's draw has no shape the plugin knows",
    shapes.REJECTION: "upstream's methods (standard, synthetic, block...) with adaptive "
    "verification and watermark keys the plugin's kernel does not handle",
    shapes.SPECULATOR: "upstream's V2 runner has no n-gram proposer before 0.32, and "
    "the plugin's would need the plugin's rejection sampler (0.20's methods)",
}

# What the plugin does with a part that a setting gives it (SETTING_PARTS),
# in the shapes where its seam keeps upstream's classes around it.
WHY_PLUGIN_BY_SETTING = {
    VERIFICATION: "the plugin's fused kernel verifies the standard method's batches "
    "whose requests use only temperature, min_p, top-k and top-p (no float32 "
    "[B*(k+1), V] canvas), and, on upstream's canvas for the logits processors and "
    "thinking budget, the batches with them that use top-k/top-p; "
    "batches of greedy requests by matching the Sampler's argmax of "
    "every logit (one pass over all rows); other methods, adaptive verification, watermarks, sampling masks, "
    "processor batches without top-k/top-p, processed logprobs and draft vocabularies "
    "narrower than the target's stay upstream's; --plugin-verification upstream keeps "
    "upstream's RejectionSampler",
    REJECTION: "the plugin's fused rejection kernel (filters folded in), or matching "
    "for greedy and seeded batches, on the batches the verification owner row names; "
    "upstream's kernels on the rest",
}

# Why a part stays upstream's in a shape of its seam that the plugin takes.
WHY_UPSTREAM_IN_SHAPE = {
    VERIFICATION: "upstream's RejectionSampler by default on this line (until an engine "
    "run measures the plugin's here); --plugin-verification plugin verifies the standard "
    "method's batches whose requests use only temperature, min_p, top-k and top-p "
    "with the plugin's fused kernel (no float32 [B*(k+1), V] canvas)",
    REJECTION: "upstream's kernels by default on this line; with --plugin-verification "
    "plugin the plugin's fused rejection kernel (filters folded in) on the batches the "
    "verification owner row names",
    NGRAM: "upstream's own GPU n-gram proposer (spec_decode/ngram/); the plugin "
    "binds a subclass that also counts the drafts it found, for the speculation policy, "
    "and schedules method 'ngram' asynchronously, as upstream schedules 'ngram_gpu' "
    "(the same proposer; 0.32's config turns it off for 'ngram')",
}


# A part whose seam's reason is about another part of that seam.
WHY_UPSTREAM_PART = {
    ALLOWED_BIAS_MIN_TOKENS: "upstream's processing stays in this draw shape; its bias "
    "kernel has barriers around the -inf overwrite from 0.25 on (0.23 and 0.24 keep "
    "the racy one), and writes the barriers do not order remain (a token both "
    "allowed and biased, a biased or allowed stop token under min_tokens; "
    "docs/troubleshooting.md)",
    FLASHINFER_SETTING: "upstream's (flashinfer_sampler_supported, where its V2 sampler "
    "uses FlashInfer); the plugin reads it the same way: " + cfg.FLASHINFER_VALUES,
}


def _shape_takes(part: str, found: dict[str, Found]) -> bool:
    """Whether ``part``'s seam was found in a shape that takes it."""
    shape = found[SEAM_OF_PART[part]].shape
    return shape is not None and shape in PART_SHAPES.get(part, (shape,))


def _setting(part: str, found: dict[str, Found]) -> Setting | None:
    """``part``'s SETTING_PARTS entry where its seam's shape offers it."""
    setting = SETTING_PARTS.get(part)
    return setting if setting and found[SEAM_OF_PART[part]].shape in setting.shapes else None


def plugin_takes(part: str, found: dict[str, Found]) -> bool:
    """Whether the plugin owns ``part`` on an engine that names none of the
    plugin's settings, given what the seams found."""
    setting = _setting(part, found)
    if setting is not None:
        return defaults(shapes_of(found))[setting.attr] == setting.plugin_value
    return _shape_takes(part, found)


def other_choice(part: str, found: dict[str, Found]) -> str | None:
    """The flag that gives ``part`` to the other owner on an engine (where
    its seam's shape lets a setting decide); None elsewhere."""
    setting = _setting(part, found)
    if setting is None:
        return None
    plugin_default = defaults(shapes_of(found))[setting.attr] == setting.plugin_value
    return f"{setting.flag} {setting.upstream_value if plugin_default else setting.plugin_value}"


def line_found(line: str) -> dict[str, Found]:
    """``LINE_SEAMS``'s row for ``line``, as detection would report it."""
    return {
        seam: Found(seam, shape, "" if shape else WHY_UPSTREAM.get(seam, ""))
        for seam, shape in LINE_SEAMS[line].items()
    }


def parts_rows(found: dict[str, Found], line: str) -> list[tuple[str, str, str, str]]:
    """``(part, owner, why, ratio)`` for every part, given what the seams found."""
    measured = measurements.load()
    rows = []
    for part in PARTS:
        seam = found[SEAM_OF_PART[part]]
        taken = plugin_takes(part, found)
        owner = Owner.PLUGIN if taken else Owner.UPSTREAM
        if not taken and other_choice(part, found) is not None:
            owner = Owner.OPT_IN
        if taken:
            by_setting = _setting(part, found) is not None and not _shape_takes(part, found)
            why = WHY_PLUGIN_BY_SETTING[part] if by_setting else WHY_PLUGIN[part]
        elif seam.is_taken and part in WHY_UPSTREAM_IN_SHAPE:
            why = WHY_UPSTREAM_IN_SHAPE[part]
        else:
            why = WHY_UPSTREAM_PART.get(part, seam.reason)
        rows.append((part, owner.value, why, measurements.ratio_text(line, part, measured)))
    return rows


def parts_summary(found: dict[str, Found]) -> str:
    """One line for the log: which parts are the plugin's on an engine that
    names none of its settings."""
    mine = [part for part in PARTS if plugin_takes(part, found)]
    theirs = [part for part in PARTS if part not in mine]
    return f"plugin: {', '.join(mine) or 'nothing'}; upstream: {', '.join(theirs) or 'nothing'}"


# The parts' names in docs/compatibility.md's table.
SHORT_NAMES = {
    ALLOWED_BIAS_MIN_TOKENS: "allowed ids/bias/min-tokens",
    GUMBEL: "Gumbel-max",
    TOP_K_TOP_P_SEEDED: "top-k/top-p",
    TOP_K_TOP_P_FLASHINFER: "FlashInfer's batches",
    REJECTION: "rejection",
    VERIFICATION: "verification",
    NGRAM: "n-gram",
    SPECULATION_POLICY: "speculation policy",
    FP64_SETTING: "--use-fp64-gumbel",
    FLASHINFER_SETTING: "VLLM_USE_FLASHINFER_SAMPLER",
}


def _with_choice(part: str, found: dict[str, Found], verb: str) -> str:
    choice = other_choice(part, found)
    return SHORT_NAMES[part] + (f" ({choice} {verb})" if choice else "")


def compatibility_markdown() -> str:
    """docs/compatibility.md's table: one row per release line, what the
    plugin owns there (with the draw's shape) and the measured ratios."""
    out = [
        "| vLLM | draw shape | plugin owns | upstream owns | measured (plugin vs upstream) |",
        "|---|---|---|---|---|",
    ]
    measured = measurements.load()
    for line in LINE_SEAMS:
        found = line_found(line)
        mine = [_with_choice(p, found, "opts out") for p in PARTS
                if plugin_takes(p, found)]
        theirs = [_with_choice(p, found, "opts in") for p in PARTS
                  if not plugin_takes(p, found)]
        ratios = "; ".join(
            f"{SHORT_NAMES[part]}: {measurements.ratio_text(line, part, measured)}"
            for part in PARTS
            if part in measured.get(line, {})
        )
        out.append(
            f"| {line}.x | {found[shapes.DRAW].shape or '-'} | {', '.join(mine) or '-'} | "
            f"{', '.join(theirs) or '-'} | {ratios or measurements.NOT_MEASURED} |"
        )
    return "\n".join(out)


# What the README's table says the plugin does on a line, by the parts it owns.
_WHAT_IT_DOES = (
    (GUMBEL, "the draw (Gumbel-max, top-k/top-p)"),
    (ALLOWED_BIAS_MIN_TOKENS, "race-free allowed ids and logit bias"),
    (VERIFICATION, "verification of speculative drafts"),
    (NGRAM, "a GPU n-gram speculator"),
    (SPECULATION_POLICY, "the adaptive speculation policy"),
    (FP64_SETTING, "its settings"),
)


def what_it_does(found: dict[str, Found]) -> str:
    """The README's words for what the plugin does where the seams found ``found``."""
    return ", ".join(words for part, words in _WHAT_IT_DOES if plugin_takes(part, found))


def readme_markdown() -> str:
    """README.md's table: one row per run of lines where the plugin does the
    same and measured the same, the headline gain from data/measurements.json."""
    measured = measurements.load()
    rows: list[list[str]] = []
    for line in LINE_SEAMS:
        does = what_it_does(line_found(line))
        gain = measurements.ratio_text(line, END_TO_END, measured)
        if rows and rows[-1][1:] == [does, gain]:
            rows[-1][0] = f"{rows[-1][0].split('-')[0]}-{line}"
        else:
            rows.append([line, does, gain])
    out = ["| your vLLM | what the plugin does there | measured gain (plugin against stock) |",
           "|---|---|---|"]
    out += [f"| {lines} | {does} | {gain} |" for lines, does, gain in rows]
    return "\n".join(out)

