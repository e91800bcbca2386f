"""The plugin's settings: where each comes from and how it is resolved.

Two settings steer the plugin:

``use_fp64_gumbel`` (``--use-fp64-gumbel`` / ``LLM(use_fp64_gumbel=True)``)
    Draw Gumbel noise and rejection-sampling uniforms in FP64. Off by default:
    FP32 is about twice as fast and, with the plugin's tail-resolved noise,
    samples the same distribution. FP64 reproduces stock vLLM 0.20 token for
    token.

``VLLM_USE_FLASHINFER_SAMPLER`` (environment)
    Read as :data:`FLASHINFER_VALUES` says. The empty string is an error,
    as in vLLM's own reading of the variable (``int("")``).

``speculation_policy`` (``--speculation-policy`` / ``LLM(speculation_policy=...)``)
    How many n-gram draft tokens a request verifies each step. ``adaptive``
    verifies only what the proposer found, as many as the request's acceptance
    rate pays for at the step's batch size, so requests without a proposal
    run one token; ``fixed`` verifies ``num_speculative_tokens`` for every
    request every step, as vLLM does. The default per vLLM shape is in
    integration/settings/defaults.py.

``plugin_verification`` (``--plugin-verification`` / ``LLM(plugin_verification=...)``)
    Who verifies speculative drafts from vLLM 0.32 on: ``upstream`` keeps
    upstream's RejectionSampler; ``plugin`` lets the plugin's fused
    rejection kernel verify the batches it carries exactly (the
    ``standard`` method; temperature, min_p, top-k and top-p folded into the
    kernel, no ``[B * (k + 1), V]`` float32 canvas; batches with logits
    processors that use top-k/top-p on upstream's processed canvas) and
    leaves every other batch to upstream's code
    (integration/verification/verify_step.py). The default per vLLM shape
    is in integration/settings/defaults.py.

All are resolved once, in the front-end process, by the ``create_model_config``
wrapper, and stored on the ``ModelConfig`` instance under the attribute names
below. ``ModelConfig`` travels to every engine-core and worker process (fork,
spawn or Ray), so every worker decides the same way and none reads the
environment again. Workers read them with :func:`settings_from_model_config`,
which falls back to the defaults for ModelConfigs built elsewhere (draft
models, tests).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

FLASHINFER_ENV = "VLLM_USE_FLASHINFER_SAMPLER"
# The one sentence the README, docs/configuration.md and `info` give for it
# (tests/test_docs.py).
PLUGIN_DRAWS = "the plugin's fused kernel draws every top-k/top-p batch"
FLASHINFER_DRAWS = (
    "FlashInfer draws the top-k/top-p batches it can honour "
    "(start-up fails where the GPU cannot run it)"
)
FLASHINFER_VALUES = (
    f"unset or 0: {PLUGIN_DRAWS}; 1: {FLASHINFER_DRAWS}; any other value, empty "
    "included, fails at start-up"
)

# Attribute names on vLLM's ModelConfig (class defaults plus instance values).
FP64_ATTR = "use_fp64_gumbel"
FLASHINFER_ATTR = "flashinfer_sampler"
SPECULATION_POLICY_ATTR = "speculation_policy"
VERIFICATION_ATTR = "plugin_verification"

ADAPTIVE = "adaptive"
FIXED = "fixed"
SPECULATION_POLICIES = (ADAPTIVE, FIXED)
# The speculative methods whose drafts are n-gram proposals: the plugin's
# proposer answers both on 0.20, and upstream's V2 runner builds one GPU
# proposer for both from 0.32 (its config schedules only "ngram_gpu"
# asynchronously on 0.32; the plugin schedules both so).
NGRAM_METHODS = ("ngram", "ngram_gpu")

UPSTREAM = "upstream"
PLUGIN = "plugin"
VERIFICATIONS = (UPSTREAM, PLUGIN)

FP64_HELP = (
    "Draw the Gumbel noise of sampling and the uniforms of rejection sampling "
    "in FP64 instead of FP32 (vllm-sampling-plugin). FP64 reproduces stock "
    "vLLM 0.20's sampled tokens exactly but costs about 2x in the sampling "
    "kernel; FP32 is the default and samples the same distribution."
)

SPECULATION_POLICY_HELP = (
    "How many n-gram draft tokens each request verifies per step "
    "(vllm-sampling-plugin). 'adaptive' verifies only the tokens the proposer "
    "found, as many as the request's acceptance rate pays for at the step's "
    "batch size, so requests without a proposal cost one token; 'fixed' "
    "verifies num_speculative_tokens for every request every step, as vLLM does."
)

VERIFICATION_HELP = (
    "Who verifies speculative drafts (vllm-sampling-plugin, vLLM 0.32 onward). "
    "'upstream' keeps vLLM's RejectionSampler; 'plugin' verifies the batches "
    "of the 'standard' method whose sampling parameters are only temperature, "
    "min_p, top-k and top-p with the plugin's fused rejection kernel (no "
    "float32 [B*(k+1), V] canvas), and those with logits processors that use "
    "top-k/top-p on vLLM's processed canvas; it leaves every other batch to vLLM's."
)


def check_verification(value: object) -> str:
    """``value`` if it names a verification owner; ValueError naming the setting otherwise."""
    if value not in VERIFICATIONS:
        raise ValueError(
            f"plugin_verification={value!r} is not valid: use one of "
            f"{', '.join(repr(v) for v in VERIFICATIONS)}."
        )
    return value


def check_speculation_policy(value: object) -> str:
    """``value`` if it names a policy; ValueError naming the setting otherwise."""
    if value not in SPECULATION_POLICIES:
        raise ValueError(
            f"speculation_policy={value!r} is not valid: use one of "
            f"{', '.join(repr(p) for p in SPECULATION_POLICIES)}."
        )
    return value


@dataclass(frozen=True)
class PluginSettings:
    """Resolved settings, as every worker sees them."""

    use_fp64_gumbel: bool = False
    # None: unset (the plugin's fused kernel takes FlashInfer's batches); True/False: set explicitly.
    flashinfer_sampler: bool | None = None
    speculation_policy: str = ADAPTIVE
    plugin_verification: str = UPSTREAM


def parse_flashinfer_env(environ: dict[str, str] | None = None) -> bool | None:
    """Read ``VLLM_USE_FLASHINFER_SAMPLER``: ``"1"`` -> True, ``"0"`` -> False,
    unset -> None. Anything else, the empty string included, raises ValueError
    naming the variable.
    """
    raw = (os.environ if environ is None else environ).get(FLASHINFER_ENV)
    if raw is None:
        return None
    value = raw.strip()
    if value == "1":
        return True
    if value == "0":
        return False
    raise ValueError(
        f"{FLASHINFER_ENV}={raw!r} is not valid: use 1 (FlashInfer draws the "
        f"top-k/top-p batches it can honour), 0 or leave it unset (the plugin's "
        f"fused kernel draws them)."
    )


def settings_from_model_config(model_config: object | None) -> PluginSettings:
    """The settings stored on a vLLM ModelConfig, defaults where absent."""
    return PluginSettings(
        use_fp64_gumbel=bool(getattr(model_config, FP64_ATTR, False)),
        flashinfer_sampler=getattr(model_config, FLASHINFER_ATTR, None),
        speculation_policy=getattr(model_config, SPECULATION_POLICY_ATTR, ADAPTIVE),
        plugin_verification=getattr(model_config, VERIFICATION_ATTR, UPSTREAM),
    )
