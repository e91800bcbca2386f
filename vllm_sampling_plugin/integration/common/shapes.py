"""The shapes each seam's adapter can find, by name. No vLLM import:
integration/parts.py and ``vllm-sampling-plugin info`` use them anywhere."""

from __future__ import annotations

# The seams, in the order they are applied.
SETTINGS = "settings"
DRAW = "draw"
REJECTION = "rejection"
SPECULATOR = "speculator"
WARM_UP = "warm-up"
SEAMS = (SETTINGS, DRAW, REJECTION, SPECULATOR, WARM_UP)

# settings.py
ENGINE_ARGS_WRAPPED = "EngineArgs -> ModelConfig attributes"
# draw.py
SAMPLE = "sample()"
SAMPLE_SKIPPING_TOP_K_TOP_P = "sample(skip_top_k_top_p)"
SAMPLE_RANDOM = "_sample_random()"
# rejection.py
STRICT_PROBABILISTIC_SYNTHETIC = "RejectionSampler(sampler, spec_config, device), strict/probabilistic/synthetic"
VERIFY_STEP_OVER_UPSTREAM = "upstream's RejectionSampler, its _verify step on --plugin-verification plugin"
VERIFY_STEP_OVER_DRAFT_LOGITS_CACHE = (
    "upstream's RejectionSampler (DraftLogitsCache, trace replay), its _verify step on --plugin-verification plugin"
)
# The shapes in which upstream's RejectionSampler keeps its class and the
# plugin verifies through its verify step (--plugin-verification).
VERIFY_STEPS = (VERIFY_STEP_OVER_UPSTREAM, VERIFY_STEP_OVER_DRAFT_LOGITS_CACHE)
# speculator.py
NGRAM_BEFORE_REQUEST_STATE = "init_speculator(vllm_config, device), n-gram added"
POLICY_OVER_UPSTREAM_NGRAM = "upstream's NgramGPUSpeculator, proposal counts added"
POLICY_OVER_UPSTREAM_NGRAM_AND_SUFFIX = (
    "upstream's NgramGPUSpeculator and SuffixSpeculator, proposal counts added"
)
POLICY_OVER_UPSTREAM = (POLICY_OVER_UPSTREAM_NGRAM, POLICY_OVER_UPSTREAM_NGRAM_AND_SUFFIX)
# warmup.py
AFTER_DUMMY_SAMPLER_RUN = "after GPUModelRunner._dummy_sampler_run(hidden_states)"
