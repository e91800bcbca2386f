"""The draw seam's noise: which stream upstream's ``sample/gumbel.py`` draws
in each precision, and which stream the plugin's draw takes on an engine.

Every draw of the plugin is keyed by (seed, position, token), as upstream's.
Where upstream's RejectionSampler verifies drafts (0.21 on), the runner
hands *every* row of a step whose batch carries a draft to it
(``GPUModelRunner.sample``: ``num_draft_tokens == 0`` goes to the Sampler,
anything else to the RejectionSampler), and its bonus/resample draw is
``gumbel_block_argmax`` with the row's own (seed, position), not salted for
the target. So on an engine that speculates a seeded row is drawn by the
plugin on some steps and by upstream on others, depending on whether a
batch-mate had drafts; its tokens are reproducible only if both draw the
same noise. Upstream's noise, read from the wheels
(``v1/worker/gpu/sample/gumbel.py`` and ``spec_decode/rejection_sampler*``):

| vLLM | FP64 | FP32 | the plugin's stream |
|---|---|---|---|
| 0.21 | ``tl_rand64(tl.randint(seed, pos), token)`` (no FP32 draw: the RejectionSampler is FP64 only) | none | FP64 ``philox``; FP32: none |
| 0.22-0.24 | as 0.21 | ``tl.rand(tl.randint(seed, pos), token)``, ``-log(-log(u))`` | FP64 ``philox``; FP32: none |
| 0.25-0.27 | as 0.21 | ``tl_rand32`` (``tl.rand`` kept above 0), ``-log(-log(u))`` | FP64 ``philox``; FP32: none |
| 0.28-0.30 | as 0.21 | ``tl_rand32`` in ``gumbel_noised_argmax``, ``-log(-log1p(-u))`` | FP64 ``philox``; FP32: none |
| 0.31-0.34 | ``murmur3_uniform64`` | ``murmur3_uniform32``, ``-log(-log1p(-u))`` (series) | ``murmur3`` in both |

The plugin's FP32 ``philox`` stream (ops/random.py: 7-round Philox, four
tokens a call) is not Triton's ``tl.rand`` (10-round Philox, one token a
call, another uniform), so before 0.31 no FP32 stream of the plugin is
upstream's. There the plugin's draw would make a seeded request that
speculates in FP32 get other tokens when batch-mates' drafts change, while
stock vLLM (one noise in both samplers) keeps it reproducible: such an
engine keeps upstream's Sampler whole (:func:`upstream_sampler_instead`),
and ``--use-fp64-gumbel`` (whose stream is upstream's on every line) lets the
plugin draw. The start-up log line says which case an engine is in.

Why not upstream's FP32 murmur3 noise on every engine: it costs more GPU
time and buys nothing without speculation (host side the two streams are
the same launch; device side, compiled for sm_90, the Gumbel kernel's tile
loop takes 88 SASS instructions a token against 32, in a kernel that is
ALU-bound at production vocabularies; docs/architecture.md, "FP32 noise").
"""

from __future__ import annotations

import inspect
import logging
from typing import Any

logger = logging.getLogger("vllm.vllm_sampling_plugin")

# The plugin's own FP32 stream (ops/random.py), the faster one.
PLUGIN_FP32_STREAM = "philox"
# The ops' name of upstream's murmur3 streams (0.31 on).
MURMUR3 = "murmur3"


def upstream_fp64_stream() -> str:
    """The FP64 noise stream of the installed ``sample/gumbel.py`` (the ops'
    ``fp64_stream`` name), so that ``--use-fp64-gumbel`` keeps upstream's tokens:
    Philox through 0.30, murmur3 from 0.31."""
    from vllm.v1.worker.gpu.sample import gumbel

    return MURMUR3 if hasattr(gumbel, "murmur3_uniform64") else "philox"


def upstream_fp32_noise() -> str | None:
    """Upstream's FP32 Gumbel noise: the ops' stream name when the plugin has
    it (``"murmur3"``, 0.31 on), a description when it has not, None where
    upstream draws no FP32 noise (0.21: ``gumbel_sample`` has no ``use_fp64``)."""
    from vllm.v1.worker.gpu.sample import gumbel

    if hasattr(gumbel, "murmur3_uniform32"):
        return MURMUR3
    if "use_fp64" not in inspect.signature(gumbel.gumbel_sample).parameters:
        return None
    return "Triton's tl.rand"


def upstream_verifies_drafts(vllm_config: Any = None) -> bool:
    """Whether upstream's noise draws the steps with drafts of the engine with
    ``vllm_config``: the runner's RejectionSampler is upstream's (the rejection
    seam left it), or it is the plugin's verify-step takeover (0.32 on)
    on an engine whose drafts it leaves upstream's (``plugin_verification``
    ``upstream``, or an engine-level fallback; the plugin's verification
    draws from the plugin's Philox streams)."""
    import vllm.v1.worker.gpu.model_runner as model_runner

    rejection_sampler = model_runner.RejectionSampler
    if rejection_sampler.__module__.startswith("vllm."):
        return True
    plugin_verifies = getattr(rejection_sampler, "plugin_verifies", None)
    if plugin_verifies is not None:
        return not plugin_verifies(vllm_config)
    return False


def upstream_draw_reason(vllm_config: Any) -> str | None:
    """Why the engine with ``vllm_config`` keeps upstream's draw, or None
    where the plugin draws its tokens: an engine that speculates in FP32 where
    upstream's RejectionSampler draws the steps with drafts in noise that no
    FP32 stream of the plugin reproduces (0.21-0.30)."""
    if getattr(vllm_config, "speculative_config", None) is None:
        return None
    if getattr(getattr(vllm_config, "model_config", None), "use_fp64_gumbel", False):
        return None
    if not upstream_verifies_drafts(vllm_config):
        return None
    upstream = upstream_fp32_noise()
    if upstream == MURMUR3:
        return None
    drawn = "FP64 Philox noise only" if upstream is None else f"FP32 noise from {upstream}"
    return (
        f"speculative decoding in FP32: upstream's RejectionSampler draws the steps "
        f"with drafts with {drawn}, which no FP32 stream of the plugin reproduces, "
        "so the plugin's draw would make a seeded request's tokens depend on its "
        "batch-mates' drafts; with --use-fp64-gumbel the plugin draws (its FP64 "
        "stream is upstream's)"
    )


def upstream_sampler_instead(upstream_sampler: type, vllm_config: Any, args: tuple, kwargs: dict):
    """Upstream's Sampler built from the runner's arguments, for an engine
    whose draw stays upstream's (:func:`upstream_draw_reason`, logged once),
    else None. Called from the plugin Samplers' ``__new__``: returning an
    object that is not the plugin's class skips the plugin's ``__init__``."""
    reason = upstream_draw_reason(vllm_config)
    if reason is None:
        return None
    logger.info("vllm-sampling-plugin sampler: upstream's Sampler draws this engine's tokens: %s.", reason)
    return upstream_sampler(*args, **kwargs)


def _runner_rejection_sampler() -> type:
    import vllm.v1.worker.gpu.model_runner as model_runner

    return model_runner.RejectionSampler


def fp32_noise(vllm_config: Any) -> tuple[str, str]:
    """``(fp32_stream, what the log line says)`` for the plugin's FP32 draw
    on an engine with ``vllm_config`` (None: no speculation known)."""
    if getattr(vllm_config, "speculative_config", None) is None:
        return PLUGIN_FP32_STREAM, "FP32, the plugin's Philox stream (no speculative decoding)"
    if not upstream_verifies_drafts(vllm_config):
        rejection_sampler = _runner_rejection_sampler()
        if getattr(rejection_sampler, "plugin_verifies", None) is not None:
            return PLUGIN_FP32_STREAM, (
                "FP32, the plugin's Philox stream (the plugin's verification: "
                "a seeded request's drafts are verified by matching these draws)"
            )
        return PLUGIN_FP32_STREAM, (
            "FP32, the plugin's Philox stream (the plugin verifies drafts by "
            "matching its own draws)"
        )
    if upstream_fp32_noise() == MURMUR3:
        return MURMUR3, (
            "FP32, upstream's murmur3 stream (speculative decoding: upstream's "
            "RejectionSampler draws the steps with drafts, with the same noise)"
        )
    # Only FP64 engines get here (upstream_draw_reason keeps FP32 ones upstream's).
    return PLUGIN_FP32_STREAM, (
        "FP32, the plugin's Philox stream, which is not upstream's FP32 noise: "
        "an engine that speculates in FP32 keeps upstream's Sampler"
    )
