"""vLLM 0.32/0.33's V2 runner with the plugin, end to end, on a tiny random Llama.

On these lines the plugin replaces only the Sampler's draw (``PluginSampler``
of integration/draw/ overrides ``_sample_random``); the rejection
sampler, the n-gram proposer and ``use_fp64_gumbel`` stay upstream's
(docs/design/vllm-0.32-integration.md), and FlashInfer keeps its batches only
when ``VLLM_USE_FLASHINFER_SAMPLER=1`` asks for it. So these tests check
that the runner holds the plugin's sampler with upstream's precision flag,
that seeded requests reproduce and are batch-invariant, that upstream's
speculation and every rejection method still run around the plugin's
sampler, and that upstream's sampling features (logprobs, structured
outputs, custom logits processors, thinking budget, watermarking) still work.

Every engine starts in a fresh interpreter (only the entry points load the
plugin) and prints one JSON line with what it saw. Engines size their KV
cache explicitly (``kv_cache_memory_bytes``: no memory profiling that another
engine's allocations could upset), so the ``-k`` groups listed at the end of
this docstring can run in parallel shells, and the two engines a comparison
needs start side by side.

The dummy weights are uniform in +-1e-3, so logits lie within ~1e-5 of each
other: the next-token distribution is nearly uniform and its last bits depend
on the batch's shape (which GEMM kernel runs). Comparisons between runs whose
batches differ therefore either allow a few diverging prompts (greedy with and
without speculation, as tests/e2e/test_engine.py does) or give the request a
logit bias of distinct levels 0.15 apart, so that its own distribution, not
the model's noise, decides which tokens survive top-k/top-p (batch invariance).

Parallel shells (about 4 minutes in all on an H100, the ``fp32`` group
about 2 more where FlashInfer first compiles its sampling kernels, for the
engine that asks for it):
``-k fp32``, ``-k "fp64 or watermark"``, ``-k "ngram_speculation and async_off"``,
``-k "ngram_speculation and async_on"``, ``-k rejection_method``,
``-k upstream_feature``.
"""

from __future__ import annotations

import json
import math
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.e2e.structured_checks import assert_structured_outputs
from tests.integration.helpers import run_python
from tests.tiny_model import write_tiny_llama
from tests.vllm_lines import INSTALLED_LINE, needs_seam, needs_vllm_line
from vllm_sampling_plugin.integration.settings.defaults import defaults
from vllm_sampling_plugin.integration.common import shapes
from vllm_sampling_plugin.integration.version import LINE_SEAMS

# Every line where the plugin keeps upstream's Sampler and replaces its draw
# (checked on an H100 on 0.32 and 0.33; on 0.23-0.31 run the sampler tests,
# whose engine arguments every such line has, e.g. -k "seeded_request or
# valid_tokens or runner_holds"; on 0.26 the route recorder first met the
# sample(skip_top_k_top_p) shape, which has no _sample_random).
LINES = tuple(
    line
    for line, seams in LINE_SEAMS.items()
    if seams[shapes.DRAW] in (shapes.SAMPLE_SKIPPING_TOP_K_TOP_P, shapes.SAMPLE_RANDOM)
)

pytestmark = [
    pytest.mark.gpu,
    needs_vllm_line(
        *LINES,
        why="the lines where the plugin replaces only the Sampler's draw; 0.20: "
        "tests/e2e/test_engine.py",
    ),
]

PLUGIN_SAMPLER = (
    "vllm_sampling_plugin.integration.draw."
    + ("sample_skipping_top_k_top_p.PluginInlineDrawSampler"
       if INSTALLED_LINE in LINES
       and LINE_SEAMS[INSTALLED_LINE][shapes.DRAW] == shapes.SAMPLE_SKIPPING_TOP_K_TOP_P
       else "sample_random.PluginRandomDrawSampler")
)
UPSTREAM_SAMPLER = "vllm.v1.worker.gpu.sample.sampler.Sampler"
UPSTREAM_REJECTION_SAMPLER = "vllm.v1.worker.gpu.spec_decode.rejection_sampler.RejectionSampler"
PLUGIN_VERIFYING_REJECTION_SAMPLER = (
    "vllm_sampling_plugin.integration.verification.verify_step.PluginVerifyingRejectionSampler"
)
# What the runner holds for a standard-method engine that names no
# plugin_verification: the plugin's verify-step takeover where that is the
# line's default (0.32, 0.33: integration/settings/defaults.py), upstream's object elsewhere.
DEFAULT_REJECTION_SAMPLER = (
    PLUGIN_VERIFYING_REJECTION_SAMPLER
    if defaults(LINE_SEAMS.get(INSTALLED_LINE, {})).get("plugin_verification") == "plugin"
    else UPSTREAM_REJECTION_SAMPLER
)
# Upstream's GPU n-gram proposer, subclassed by the plugin to report how many
# drafts it found (integration/speculator/upstream_ngram.py) for the adaptive policy.
REPORTING_NGRAM = "vllm_sampling_plugin.integration.speculator.upstream_ngram.ReportingNgramGPUSpeculator"
WATERMARK_SAMPLER = "vllm.v1.watermarking.gpu_sampler.GPUWatermarkSampler"

# Upstream's rejection methods (config/speculative.py, RejectionSampleMethod)
# and what each needs besides the method's name.
REJECTION_METHODS = {
    "0.32": {"standard": {}, "synthetic": {"synthetic_acceptance_length": 2.5}, "block": {}},
    "0.33": {
        "standard": {},
        "synthetic": {"synthetic_acceptance_length": 2.5},
        "block": {},
        "fly": {},
    },
}

# "ngram_gpu": with "ngram" stock 0.32 turns async scheduling off (and refuses
# it when asked for; the plugin lifts that, integration/speculator/vllm_config.py); both
# build the same NgramGPUSpeculator in the V2 runner, and "ngram_gpu" asks for
# async scheduling the same way with and without the plugin.
NGRAM_GPU = {
    "method": "ngram_gpu",
    "num_speculative_tokens": 3,
    "prompt_lookup_min": 2,
    "prompt_lookup_max": 3,
}
# "ngram", which on 0.32 the plugin schedules asynchronously as upstream
# schedules "ngram_gpu" (test_ngram_speculation_keeps_greedy_tokens checks
# that the engine got what it asked for).
NGRAM = {**NGRAM_GPU, "method": "ngram"}

# Distinct levels on 64 tokens (ids 100..163): with top_k=20 or top_p=0.9 the
# surviving set and the draw are decided by the bias, not by the dummy
# model's near-ties. The five highest are TOP5_BIASED.
BIAS_SRC = "{t: 0.15 * (i + 1) for i, t in enumerate(range(100, 164))}"
TOP5_BIASED = list(range(159, 164))

PROBE = """
def probe(worker):
    runner = worker.model_runner
    def name(obj):
        return None if obj is None else type(obj).__module__ + "." + type(obj).__qualname__
    sampler = runner.sampler
    rejection = getattr(runner, "rejection_sampler", None)
    return {
        "sampler": name(sampler),
        "sampler_mro": [c.__module__ + "." + c.__qualname__ for c in type(sampler).__mro__],
        "rejection_sampler": name(rejection),
        "rejection_sampler_wraps_sampler": rejection is not None and rejection.sampler is sampler,
        "speculator": name(getattr(runner, "speculator", None)),
        "fp64": sampler.use_fp64_gumbel,
        "flashinfer": sampler.use_flashinfer,
    }
"""

ENGINE = """
import json, math, random, time, traceback
from vllm import LLM, SamplingParams
{probe}
{setup}
llm = LLM(model={model!r}, load_format="dummy", attention_backend="TRITON_ATTN",
          gpu_memory_utilization=0.06, kv_cache_memory_bytes=256 << 20,
          max_model_len=1024, max_num_seqs=16, enable_prefix_caching=False, seed=0,
          {kwargs})
info = llm.collective_rpc(probe)[0]
info["vocab"] = llm.model_config.get_vocab_size()
info["async"] = llm.llm_engine.vllm_config.scheduler_config.async_scheduling
BIAS = {bias}
def ids(outs):
    return [list(o.outputs[0].token_ids) for o in outs]
def phase(name, run):
    # One feature's failure is reported by its own test, not by the others'.
    try:
        run()
        info[name + "_error"] = None
    except Exception:
        info[name + "_error"] = traceback.format_exc()[-4000:]
"""

SPEC_METRICS = """
def counter(name):
    return sum(m.value for m in llm.get_metrics() if m.name == name and hasattr(m, "value"))
def acceptance():
    return (counter("vllm:spec_decode_num_draft_tokens"),
            counter("vllm:spec_decode_num_accepted_tokens"),
            counter("vllm:spec_decode_num_drafts"))
"""


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> str:
    return str(write_tiny_llama(tmp_path_factory.mktemp("tiny")))


def run_engine(
    model: str, kwargs: str, body: str, env: dict[str, str | None] | None = None, setup: str = ""
) -> dict:
    code = ENGINE.format(probe=PROBE, setup=setup, model=model, kwargs=kwargs, bias=BIAS_SRC)
    code += body + "\nprint(json.dumps(info))\n"
    env = {
        "VLLM_USE_V2_MODEL_RUNNER": "1",
        # collective_rpc ships the probe functions to the engine process by pickle.
        "VLLM_ALLOW_INSECURE_SERIALIZATION": "1",
        # Engines started side by side must not write one compile cache.
        "VLLM_DISABLE_COMPILE_CACHE": "1",
        **(env or {}),
    }
    out = run_python(code, env=env, timeout=600)
    result = json.loads(out.strip().splitlines()[-1])
    # What is not a token list first: a long result is cut in the log.
    summary = {key: value for key, value in result.items() if not isinstance(value, list)}
    print(json.dumps(summary, indent=1))
    print(json.dumps(result)[:20000])
    return result


def run_engines(*engines: tuple) -> list[dict]:
    """``run_engine`` for each argument tuple, all started at once."""
    with ThreadPoolExecutor(len(engines)) as pool:
        futures = [pool.submit(run_engine, *engine) for engine in engines]
        return [future.result() for future in futures]


def _assert_valid(rows: list[list[int]], vocab: int, length: int) -> None:
    assert rows and all(len(r) == length for r in rows), [len(r) for r in rows]
    assert all(0 <= t < vocab for r in rows for t in r)


# ---------------------------------------------------------------------------
# The sampler: plugin's class, upstream's precision flag, seeds, batch
# invariance, where upstream sends each batch.

ROUTE_RECORDER = """
def install_route_recorder(worker):
    import inspect
    sampler = worker.model_runner.sampler
    worker.sampler_routes = []
    def record(fused, top_k, top_p):
        worker.sampler_routes.append(
            {"fused": bool(fused), "top_k_top_p": top_k is not None or top_p is not None})
    if hasattr(sampler, "_sample_random"):
        # 0.30-0.33: upstream's _sample_random gets the fused flag.
        original = sampler._sample_random
        signature = inspect.signature(original)
        def recording(*args, **kwargs):
            arguments = signature.bind(*args, **kwargs).arguments
            # Named use_flashinfer (0.30) or use_fused_sampler (0.31 on); the
            # plugin's override takes it last of mask_args_and_fused.
            flags = [arguments[name] for name in ("use_flashinfer", "use_fused_sampler") if name in arguments]
            fused = flags[0] if flags else arguments["mask_args_and_fused"][-1]
            record(fused, arguments["top_k"], arguments["top_p"])
            return original(*args, **kwargs)
        sampler._sample_random = recording
        return
    # 0.23-0.29 (sample(skip_top_k_top_p)): a batch goes either to upstream's
    # flashinfer_sample or to the plugin's draw.
    import vllm.v1.worker.gpu.sample.sampler as upstream
    flashinfer_sample, plugin_draw = upstream.flashinfer_sample, sampler.plugin_draw
    def recording_flashinfer(logits, top_k, top_p, *args, **kwargs):
        record(True, top_k, top_p)
        return flashinfer_sample(logits, top_k, top_p, *args, **kwargs)
    def recording_draw(logits, idx_mapping, pos, top_k, top_p, *args, **kwargs):
        record(False, top_k, top_p)
        return plugin_draw(logits, idx_mapping, pos, top_k, top_p, *args, **kwargs)
    upstream.flashinfer_sample, sampler.plugin_draw = recording_flashinfer, recording_draw
def take_routes(worker):
    routes, worker.sampler_routes = worker.sampler_routes, []
    return routes
llm.collective_rpc(install_route_recorder)
def routes():
    return llm.collective_rpc(take_routes)[0]
"""

SAMPLER = ROUTE_RECORDER + """
prompts = [{"prompt_token_ids": [5 + i, 17, 33, 17, 33, 17, 33, 90 + i]} for i in range(8)]
def params(max_tokens=24, **fields):
    return SamplingParams(max_tokens=max_tokens, ignore_eos=True, **fields)

# Every kind twice, each run a batch of its own.
kinds = {
    "greedy": params(temperature=0.0),
    "seeded_top_k_top_p": params(temperature=1.0, top_k=40, top_p=0.9, seed=7),
    "seeded_top_k_top_p_other_seed": params(temperature=1.0, top_k=40, top_p=0.9, seed=8),
    "seeded_plain": params(temperature=0.8, seed=9),
    "unseeded_plain": params(temperature=0.8),
}
for name, p in kinds.items():
    info[name] = ids(llm.generate(prompts, p))
    info[name + "_again"] = ids(llm.generate(prompts, p))

outs = llm.generate(prompts, params(max_tokens=8, temperature=1.0, top_k=40, seed=10, logprobs=5))
info["raw_logprobs"] = [
    [[tok, [[t, lp.logprob] for t, lp in pos.items()]]
     for tok, pos in zip(o.outputs[0].token_ids, o.outputs[0].logprobs)]
    for o in outs]

# Batch invariance: three biased seeded targets (top-k+top-p, top-p only,
# neither) alone, then among batch-mates of every kind that stop earlier (the
# batch shrinks under the targets), in two orders, the first order twice.
def target(seed, **fields):
    return params(max_tokens=32, temperature=1.0, seed=seed, logit_bias=BIAS, **fields)
targets = [
    ("top_k_top_p", {"prompt_token_ids": [7, 8, 9, 10, 11]}, target(11, top_k=20, top_p=0.9)),
    ("top_p", {"prompt_token_ids": [12, 13, 14]}, target(12, top_p=0.9)),
    ("plain", {"prompt_token_ids": [15, 16, 17, 18, 19, 20, 21]}, target(13)),
]
mate_params = [
    ("greedy", params(max_tokens=8, temperature=0.0)),
    ("seeded", params(max_tokens=12, temperature=1.0, top_k=50, top_p=0.95, seed=99)),
    ("unseeded_top_k", params(max_tokens=16, temperature=0.7, top_k=50)),
    ("unseeded_plain", params(max_tokens=20, temperature=1.0)),
    ("greedy_top_k", params(max_tokens=24, temperature=0.0, top_k=5)),
    ("seeded_min_p", params(max_tokens=28, temperature=1.2, min_p=0.1, seed=5)),
]
mates = [(name, {"prompt_token_ids": [200 + i] * (3 + 2 * i)}, p)
         for i, (name, p) in enumerate(mate_params)]
routes()
info["alone"] = {name: ids(llm.generate([prompt], p))[0] for name, prompt, p in targets}
def batch(requests):
    outs = llm.generate([r[1] for r in requests], [r[2] for r in requests])
    return {name: tokens for (name, _, _), tokens in zip(requests, ids(outs))}
mates_first = mates + targets
interleaved = [targets[0]] + mates[:2] + [targets[1]] + mates[2:4] + [targets[2]] + mates[4:]
info["mates_first"] = batch(mates_first)
info["interleaved"] = batch(interleaved)
info["mates_first_again"] = batch(mates_first)
info["routes_seeded_batches"] = routes()

# Last, since FlashInfer may compile its sampling kernels here: seedless
# top-k/top-p batches, which upstream gives to FlashInfer where it is on.
def seedless():
    info["seedless"] = ids(llm.generate(prompts, params(max_tokens=8, temperature=1.0,
                                                         top_k=50, top_p=0.9)))
    info["routes_seedless"] = routes()
phase("seedless", seedless)
"""

# name: (use_fp64_gumbel, environment, whether FlashInfer keeps its batches
# on a GPU it supports).
SAMPLER_ENGINES = {
    # VLLM_USE_FLASHINFER_SAMPLER unset: the plugin's fused kernel takes the
    # seedless top-k/top-p batches upstream would give FlashInfer.
    "fp32_flashinfer_default": (False, {}, False),
    # Asked for: FlashInfer keeps them (and compiles its kernels here).
    "fp32_flashinfer_forced": (False, {"VLLM_USE_FLASHINFER_SAMPLER": "1"}, True),
    # Off: the plugin's, as upstream's own setting says.
    "fp64_flashinfer_off": (True, {"VLLM_USE_FLASHINFER_SAMPLER": "0"}, False),
}


@pytest.fixture(scope="module", params=list(SAMPLER_ENGINES))
def sampler_run(request, tiny_model) -> dict:
    fp64, env, flashinfer = SAMPLER_ENGINES[request.param]
    # The unset case must be unset here, whatever the caller's environment.
    env = {"VLLM_USE_FLASHINFER_SAMPLER": None, **env}
    result = run_engine(tiny_model, f"enforce_eager=True, use_fp64_gumbel={fp64}", SAMPLER, env)
    result["expected_fp64"] = fp64
    result["expected_flashinfer"] = flashinfer
    return result


def test_runner_holds_the_plugins_sampler_with_upstreams_precision_flag(sampler_run):
    """``use_fp64_gumbel`` is upstream's own EngineArgs field on these lines:
    passed to LLM(...), it reaches the plugin's sampler through upstream's
    ModelConfig, and nothing else of upstream's runner is replaced."""
    assert sampler_run["sampler"] == PLUGIN_SAMPLER
    assert UPSTREAM_SAMPLER in sampler_run["sampler_mro"]
    assert sampler_run["fp64"] is sampler_run["expected_fp64"]
    assert sampler_run["rejection_sampler"] is None and sampler_run["speculator"] is None


def test_every_kind_of_request_generates_valid_tokens(sampler_run):
    """Greedy, seeded and unseeded rows, with and without top-k/top-p."""
    vocab = sampler_run["vocab"]
    for kind in ("greedy", "seeded_top_k_top_p", "seeded_plain", "unseeded_plain"):
        _assert_valid(sampler_run[kind], vocab, 24)
    for name, tokens in sampler_run["mates_first"].items():
        assert all(0 <= t < vocab for t in tokens), name


def test_seeded_requests_reproduce_and_follow_their_seed(sampler_run):
    """Same seed, two runs: the same tokens (greedy too); another seed or no
    seed: other tokens, so the seed is what decides them."""
    for kind in ("greedy", "seeded_top_k_top_p", "seeded_plain"):
        assert sampler_run[kind] == sampler_run[kind + "_again"], kind
    assert sampler_run["seeded_top_k_top_p"] != sampler_run["seeded_top_k_top_p_other_seed"]
    assert sampler_run["unseeded_plain"] != sampler_run["unseeded_plain_again"]
    # A mixed batch run twice: every row but the unseeded ones repeats.
    first, again = sampler_run["mates_first"], sampler_run["mates_first_again"]
    for name in first:
        if not name.startswith("unseeded"):
            assert first[name] == again[name], name


def test_seeded_request_is_batch_invariant(sampler_run):
    """A seeded request gets the same tokens alone and inside batches of
    greedy, other-seed and unseeded requests, at any row, while the batch
    shrinks around it; with top-k and top-p, top-p only, and neither (whose
    batch-mates send the whole batch through the fused top-k/top-p kernel:
    the plugin draws the same noise on both routes)."""
    alone = sampler_run["alone"]
    assert set(alone) == {"top_k_top_p", "top_p", "plain"}
    for name, tokens in alone.items():
        assert len(tokens) == 32
        assert sampler_run["mates_first"][name] == tokens, name
        assert sampler_run["interleaved"][name] == tokens, name
    # The bias confines the top-k/top-p targets to the biased tokens.
    for name in ("top_k_top_p", "top_p"):
        assert all(100 <= t < 164 for t in alone[name]), name


def test_raw_logprobs_are_the_models(sampler_run):
    """Default logprobs mode: the returned logprobs are of the raw logits
    (the dummy model's near-uniform ones, about -ln(vocab)), include the
    sampled token, and are not renormalised over the top-k the draw used
    (top_k=40: renormalised they would be near -ln 40, 3.2 nats higher).
    0.32's dummy weights put every logprob within 0.01 of -ln(vocab), 0.33's
    within about 0.03 (H100), hence 0.1."""
    log_vocab = math.log(sampler_run["vocab"])
    rows = sampler_run["raw_logprobs"]
    assert len(rows) == 8 and all(len(r) == 8 for r in rows)
    for row in rows:
        for token, entries in row:
            values = dict(entries)
            assert token in {int(t) for t in values} and len(values) >= 5
            assert all(abs(v + log_vocab) < 0.1 for v in values.values()), values


def test_batches_with_a_seeded_or_greedy_row_stay_off_flashinfer(sampler_run):
    """Upstream keeps any batch with a greedy row or an explicit seed off the
    fused (FlashInfer) sampler, whatever its other rows, so the plugin draws
    every seeded row, alone or batched, which is what makes them
    batch-invariant."""
    routes = sampler_run["routes_seeded_batches"]
    assert routes, "no sampler call was recorded"
    assert not any(r["fused"] for r in routes), routes
    assert any(r["top_k_top_p"] for r in routes)


def test_seedless_top_k_top_p_batches_are_flashinfers_only_when_asked_for(sampler_run):
    """A batch of unseeded top-k/top-p rows goes to FlashInfer only with
    ``VLLM_USE_FLASHINFER_SAMPLER=1`` (on this GPU, which FlashInfer
    supports); unset or ``0``, to the plugin's fused kernel. Either way the
    tokens are valid."""
    assert sampler_run["seedless_error"] is None, sampler_run["seedless_error"]
    print(f"use_flashinfer={sampler_run['flashinfer']}")
    assert sampler_run["flashinfer"] is sampler_run["expected_flashinfer"]
    routes = sampler_run["routes_seedless"]
    assert routes and all(r["top_k_top_p"] for r in routes), routes
    assert all(r["fused"] is sampler_run["flashinfer"] for r in routes), routes
    _assert_valid(sampler_run["seedless"], sampler_run["vocab"], 8)


# FP64: the plugin draws upstream's own noise stream (murmur3), so an engine
# with the plugin and one without it give the same tokens. Each batch is the
# same in both engines, so the dummy model's logits are too, bit for bit; its
# near-uniform rows make any difference in the noise show at once.
FP64_TOKENS = """
prompts = [{"prompt_token_ids": [5 + i, 17, 33, 17, 33, 17, 33, 90 + i]} for i in range(8)]
def params(**fields):
    return SamplingParams(max_tokens=24, ignore_eos=True, **fields)
mixed = [
    params(temperature=0.0),
    params(temperature=0.8, seed=9),
    params(temperature=1.0, top_k=20, top_p=0.9, seed=7, logit_bias=BIAS),
    params(temperature=1.2, top_p=0.9, seed=3, logit_bias=BIAS),
    params(temperature=1.0, top_k=40, seed=4, logit_bias=BIAS),
    params(temperature=1.0, min_p=0.05, seed=5),
    params(temperature=0.7, seed=6),
    params(temperature=0.0, top_k=5),
]
info["tokens"] = {
    "seeded_plain": ids(llm.generate(
        prompts, [params(temperature=0.8, seed=9 + i) for i in range(len(prompts))])),
    "seeded_top_k_top_p": ids(llm.generate(
        prompts, params(temperature=1.0, top_k=20, top_p=0.9, seed=7, logit_bias=BIAS))),
    "mixed": ids(llm.generate(prompts, mixed)),
}
"""


def test_fp64_tokens_are_stock_upstreams(tiny_model):
    """``use_fp64_gumbel=True`` with the plugin gives the tokens of the same
    engine without it (``VLLM_PLUGINS=none``): plain seeded rows (the plugin's
    Gumbel-max kernel), seeded top-k/top-p rows (its fused kernel against
    upstream's mask then Gumbel-max) and a mixed batch with greedy, min-p and
    top-k rows (top-k/top-p rows carry the logit bias, so ties in the dummy
    model's logits cannot sit at a threshold). With FP32 noise the two draw
    other tokens by design."""
    kwargs = "enforce_eager=True, use_fp64_gumbel=True"
    plugin, stock = run_engines(
        (tiny_model, kwargs, FP64_TOKENS),
        (tiny_model, kwargs, FP64_TOKENS, {"VLLM_PLUGINS": "none"}),
    )
    assert plugin["sampler"] == PLUGIN_SAMPLER and stock["sampler"] == UPSTREAM_SAMPLER
    assert plugin["fp64"] is True and stock["fp64"] is True
    for name, rows in plugin["tokens"].items():
        _assert_valid(rows, plugin["vocab"], 24)
        assert rows == stock["tokens"][name], name
    # The seeds decide (the dummy model's logits are nearly flat): eight
    # seeds, eight different continuations.
    assert len({tuple(r) for r in plugin["tokens"]["seeded_plain"]}) == 8


# ---------------------------------------------------------------------------
# Upstream's n-gram speculation and rejection sampler around the plugin's
# sampler.

NGRAM_PROMPTS = """
rng = random.Random(0)
prompts = []
for i in range(24):
    motif = [rng.randrange(3, 1000) for _ in range(rng.randrange(3, 7))]
    prompts.append({"prompt_token_ids": [rng.randrange(3, 1000)] + motif * 6})
"""

GREEDY_TIMED = SPEC_METRICS + NGRAM_PROMPTS + """
params = SamplingParams(temperature=0.0, max_tokens=48, ignore_eos=True)
llm.generate(prompts[:2], params)  # warm-up
start = time.perf_counter()
outs = llm.generate(prompts, params)
elapsed = time.perf_counter() - start
info["tokens"] = ids(outs)
info["tokens_per_s"] = sum(len(t) for t in info["tokens"]) / elapsed
if llm.llm_engine.vllm_config.speculative_config is not None:
    info["drafts"], info["accepted"], info["steps"] = acceptance()
"""


@pytest.mark.parametrize("policy", ["fixed", "adaptive"])
@pytest.mark.parametrize("async_scheduling", [False, True], ids=["async_off", "async_on"])
def test_ngram_speculation_keeps_greedy_tokens(tiny_model, async_scheduling, policy):
    """Upstream's GPU n-gram proposer and the line's default verification
    (the plugin's on 0.32 and 0.33), CUDA graphs on, under each speculation
    policy: ``fixed`` (k drafts verified every step) and ``adaptive`` (the
    default on both lines: a request verifies only the drafts the proposer
    found; under async scheduling steps without drafts either side
    run with the speculator out of sight, integration/speculator/proposal_report.py):
    greedy outputs match the engine without speculation for at least 90% of
    the prompts (a verification step's batch shape may flip a near-tie) and
    drafts are accepted. The method is ``"ngram"``, which stock 0.32
    schedules synchronously: with the plugin the engine runs as asked."""
    common = f"async_scheduling={async_scheduling}, disable_log_stats=False"
    reference, spec = run_engines(
        (tiny_model, common, GREEDY_TIMED),
        (tiny_model, f"{common}, speculative_config={NGRAM!r}, speculation_policy={policy!r}",
         GREEDY_TIMED),
    )
    assert spec["sampler"] == PLUGIN_SAMPLER
    assert spec["speculator"] == REPORTING_NGRAM
    assert spec["rejection_sampler"] == DEFAULT_REJECTION_SAMPLER
    assert spec["rejection_sampler_wraps_sampler"]
    assert spec["async"] is async_scheduling and reference["async"] is async_scheduling
    same = [a == b for a, b in zip(reference["tokens"], spec["tokens"], strict=True)]
    print(
        f"{policy}, async={async_scheduling}: {reference['tokens_per_s']:.0f} tok/s without "
        f"speculation, {spec['tokens_per_s']:.0f} with n-gram; accepted "
        f"{spec['accepted']}/{spec['drafts']} drafts; {sum(same)}/{len(same)} identical"
    )
    assert spec["drafts"] > 0 and spec["accepted"] > 0
    assert sum(same) >= 0.9 * len(same)


REJECTION = SPEC_METRICS + """
rng = random.Random(0)
prompts, params = [], []
for i in range(24):
    motif = rng.sample(range(3, 1000), rng.randrange(3, 7))
    prompts.append({"prompt_token_ids": [rng.randrange(3, 1000)] + motif * 6})
    params.append(SamplingParams(temperature=1.0, seed=100 + i, allowed_token_ids=motif,
                                 max_tokens=96, ignore_eos=True))
info["tokens"] = ids(llm.generate(prompts, params))
info["allowed"] = [p.allowed_token_ids for p in params]
info["drafts"], info["accepted"], info["steps"] = acceptance()
"""


@pytest.mark.parametrize("method", list(REJECTION_METHODS.get(INSTALLED_LINE, {"standard": {}})))
def test_rejection_method_accepts_ngram_drafts(tiny_model, method):
    """Each of upstream's rejection methods verifies n-gram drafts (no draft
    logits) on random rows. ``allowed_token_ids`` (the prompt's motif, which
    the drafts are drawn from) makes the target distribution put about 1/3 to
    1/6 on each draft, so the probabilistic methods accept some; synthetic's
    rates for a mean acceptance length of 2.5 are [1, 0.5, 0]: every
    verification step accepts its first draft and never its third. The runner
    holds the plugin's takeover for ``standard`` where that is the default
    (its batches with allowed ids still go to upstream's code, per batch) and
    upstream's own object for the other methods."""
    config = {**NGRAM_GPU, "rejection_sample_method": method}
    config.update(REJECTION_METHODS[INSTALLED_LINE][method])
    result = run_engine(
        tiny_model,
        f"enforce_eager=True, disable_log_stats=False, speculative_config={config!r}",
        REJECTION,
    )
    assert result["sampler"] == PLUGIN_SAMPLER
    assert result["rejection_sampler"] == (
        DEFAULT_REJECTION_SAMPLER if method == "standard" else UPSTREAM_REJECTION_SAMPLER)
    for tokens, allowed in zip(result["tokens"], result["allowed"], strict=True):
        assert len(tokens) == 96 and set(tokens) <= set(allowed)
    mean_length = 1 + result["accepted"] / max(result["steps"], 1)
    print(f"{method}: {result['accepted']}/{result['drafts']} drafts accepted, "
          f"mean acceptance length {mean_length:.3f}")
    assert result["drafts"] > 0 and result["accepted"] > 0
    if method == "synthetic":
        assert result["accepted"] <= 2 * result["steps"]
        assert 2.2 < mean_length <= 3.0, mean_length


# ---------------------------------------------------------------------------
# Upstream's sampling features with the plugin's sampler: processed logprobs,
# a custom logits processor, thinking budget and structured outputs share one
# engine (each touches only the requests that ask for it).

FEATURES_SETUP = """
from vllm.config.reasoning import ReasoningConfig
from vllm.sampling_params import StructuredOutputsParams
"""


def structured_outputs_phase(kinds: str) -> str:
    """An engine snippet's phase asking for structured_checks.py's JSON schema
    and regex under each of ``kinds`` (the source of a dict: name -> sampling
    fields), four requests each; their (text, finish reason) go to
    ``info["structured"]``."""
    return """
def structured_outputs():
    # A finite language, so that even a greedy walk ends within max_tokens.
    schema = {"type": "object",
              "properties": {"a": {"type": "boolean"}, "b": {"enum": ["x", "yy", "zzz"]}},
              "required": ["a", "b"], "additionalProperties": False}
    kinds = """ + kinds + """
    texts = {}
    for kind, so in {"json": StructuredOutputsParams(json=schema),
                     "regex": StructuredOutputsParams(regex=r"[0-9]{3}-[a-z]{2}")}.items():
        for name, fields in kinds.items():
            outs = llm.generate([{"prompt_token_ids": [5, 6, 7, 8, 5, 6, 7, 8]}] * 4,
                                SamplingParams(max_tokens=200, structured_outputs=so, **fields))
            texts[kind + "/" + name] = [(c.text, c.finish_reason) for o in outs for c in o.outputs]
    info["structured"] = texts
phase("structured_outputs", structured_outputs)
"""


FEATURES_KWARGS = (
    "enforce_eager=True, logprobs_mode='processed_logprobs', "
    "logits_processors=['tests.e2e.forcing_logits_processor:ForceToken'], "
    "structured_outputs_config={'backend': 'xgrammar', 'disable_any_whitespace': True}, "
    # Multi-token markers: a random walk will not emit them by chance.
    "reasoning_config=ReasoningConfig(reasoning_start_str='kernel gumbel', "
    "reasoning_end_str='gumbel kernel')"
)

FEATURES = """
prompts = [{"prompt_token_ids": [5 + i, 17, 33, 17, 33, 90 + i]} for i in range(4)]

def processed_logprobs():
    for name, fields in {"seeded": {"seed": 21}, "unseeded": {}}.items():
        outs = llm.generate(prompts, SamplingParams(
            temperature=1.0, top_k=5, logit_bias=BIAS, logprobs=10, max_tokens=12,
            ignore_eos=True, **fields))
        info["processed_" + name] = [
            [[tok, [[t, lp.logprob] for t, lp in pos.items()]]
             for tok, pos in zip(o.outputs[0].token_ids, o.outputs[0].logprobs)]
            for o in outs]
phase("processed_logprobs", processed_logprobs)

def custom_logits_processor():
    outs = llm.generate(prompts[:3], [
        SamplingParams(temperature=1.0, top_k=20, top_p=0.9, seed=31, max_tokens=16,
                       ignore_eos=True, extra_args={"force_token_id": 77}),
        SamplingParams(temperature=0.9, max_tokens=16, ignore_eos=True,
                       extra_args={"force_token_id": 78}),
        SamplingParams(temperature=1.0, top_k=20, seed=32, max_tokens=16, ignore_eos=True),
    ])
    info["forced"] = ids(outs)
phase("custom_logits_processor", custom_logits_processor)

def thinking_budget():
    config = llm.llm_engine.vllm_config.reasoning_config
    start = list(config.reasoning_start_token_ids)
    info["reasoning_end"] = list(config.reasoning_end_token_ids)
    cases = {
        "greedy": (0, dict(temperature=0.0)),
        "seeded_top_k_top_p": (5, dict(temperature=1.0, top_k=40, top_p=0.9, seed=41)),
        "unseeded": (3, dict(temperature=1.0)),
        "no_budget": (None, dict(temperature=1.0, seed=42)),
    }
    outs = llm.generate(
        [{"prompt_token_ids": [40, 41, 42] + start}] * len(cases),
        [SamplingParams(thinking_token_budget=budget, max_tokens=12, ignore_eos=True, **f)
         for budget, f in cases.values()])
    info["thinking"] = {name: [budget, tokens]
                        for (name, (budget, _)), tokens in zip(cases.items(), ids(outs))}
phase("thinking_budget", thinking_budget)
""" + structured_outputs_phase(
    '{"greedy": dict(temperature=0.0), '
    '"seeded_top_k_top_p_min_p": dict(temperature=1.0, top_k=3, top_p=0.8, min_p=0.1, seed=1), '
    '"unseeded": dict(temperature=1.3)}'
)


@pytest.fixture(scope="module")
def features_run(tiny_model) -> dict:
    return run_engine(tiny_model, FEATURES_KWARGS, FEATURES, setup=FEATURES_SETUP)


def test_upstream_feature_engine_holds_the_plugins_sampler(features_run):
    """Custom logits processors, a reasoning config and processed logprobs
    leave the runner's sampler the plugin's."""
    assert features_run["sampler"] == PLUGIN_SAMPLER


def test_upstream_feature_processed_logprobs_show_the_top_k_mask(features_run):
    """``processed_logprobs``: upstream keeps these batches off FlashInfer and
    the plugin returns the masked logits it drew from, so the logprobs are of
    the biased, top-5 masked distribution: exactly the five highest-biased
    tokens are finite, they sum to one, and the drawn token is among them."""
    assert features_run["processed_logprobs_error"] is None, features_run[
        "processed_logprobs_error"
    ]
    for name in ("processed_seeded", "processed_unseeded"):
        rows = features_run[name]
        assert len(rows) == 4 and all(len(r) == 12 for r in rows), name
        for row in rows:
            for token, entries in row:
                finite = {int(t): v for t, v in entries if v > -math.inf}
                assert sorted(finite) == TOP5_BIASED, (name, entries)
                assert token in finite
                assert abs(sum(math.exp(v) for v in finite.values()) - 1) < 1e-3


def test_upstream_feature_custom_logits_processor_shapes_the_draw(features_run):
    """A custom V2 logits processor (tests/e2e/forcing_logits_processor.py)
    runs before the plugin's draw: forced rows, seeded top-k/top-p or
    unseeded, give only their token; the row that did not ask is free."""
    assert features_run["custom_logits_processor_error"] is None, features_run[
        "custom_logits_processor_error"
    ]
    forced_seeded, forced_unseeded, free = features_run["forced"]
    assert forced_seeded == [77] * 16
    assert forced_unseeded == [78] * 16
    assert len(free) == 16 and set(free) - {77, 78}


def test_upstream_feature_thinking_budget_forces_the_end_marker(features_run):
    """Thinking budget without a reasoning parser (``reasoning_config`` with
    marker strings): after ``budget`` thinking tokens the end marker is
    forced (a 1e9 logit) whatever the draw; a request without a budget is not
    forced."""
    assert features_run["thinking_budget_error"] is None, features_run["thinking_budget_error"]
    end = features_run["reasoning_end"]
    assert len(end) >= 2
    for name, (budget, tokens) in features_run["thinking"].items():
        assert len(tokens) == 12, name
        windows = [tokens[i : i + len(end)] for i in range(len(tokens) - len(end) + 1)]
        if budget is None:
            assert end not in windows, (name, tokens)
        else:
            assert tokens[budget : budget + len(end)] == end, (name, budget, tokens)
            assert end not in windows[:budget], (name, tokens)


def test_upstream_feature_structured_outputs_parse(features_run):
    """The grammar bitmask reaches every draw: JSON of a finite schema and a
    regex, greedy, seeded top-k/top-p/min-p and unseeded, all finish and
    parse."""
    assert features_run["structured_outputs_error"] is None, features_run[
        "structured_outputs_error"
    ]
    import re

    texts = features_run["structured"]
    assert len(texts) == 6
    assert all(len(outputs) == 4 for outputs in texts.values()), texts
    assert_structured_outputs(texts)


# ---------------------------------------------------------------------------
# Watermarking: upstream builds its own sampler, which the plugin leaves alone.

WATERMARK = """
from vllm.v1.watermarking.gumbel import GumbelWatermarkDetector
prompts = [{"prompt_token_ids": [5 + i, 17, 33, 17, 33, 90 + i]} for i in range(8)]
marked = llm.generate(prompts, SamplingParams(temperature=1.0, max_tokens=64, ignore_eos=True))
plain = llm.generate(prompts, SamplingParams(temperature=1.0, max_tokens=64, ignore_eos=True,
                                             watermarking=False))
detector = GumbelWatermarkDetector(key=1234, context_width=4)
for name, outs in {"marked": marked, "plain": plain}.items():
    info[name] = ids(outs)
    info[name + "_p"] = [detector.detect(p["prompt_token_ids"] + t).p_value
                         for p, t in zip(prompts, ids(outs))]
"""


def test_watermarked_engine_keeps_upstreams_watermark_sampler(tiny_model):
    """With a watermark config the runner builds upstream's
    GPUWatermarkSampler, a subclass of upstream's Sampler, not of the
    plugin's; its outputs carry the watermark (upstream's detector finds it)
    and requests that opt out do not."""
    result = run_engine(tiny_model, "enforce_eager=True, watermark_config={'key': 1234}", WATERMARK)
    assert result["sampler"] == WATERMARK_SAMPLER
    assert UPSTREAM_SAMPLER in result["sampler_mro"]
    assert not any(c.startswith("vllm_sampling_plugin") for c in result["sampler_mro"])
    _assert_valid(result["marked"], result["vocab"], 64)
    print(f"p-values: watermarked {result['marked_p']}, opted out {result['plain_p']}")
    assert all(p < 1e-6 for p in result["marked_p"])
    # Unmarked text is flagged at p <= 0.01 by chance about once in 100.
    assert sum(p <= 0.01 for p in result["plain_p"]) <= 1


# ---------------------------------------------------------------------------
# The plugin's verification (0.33's default, integration/settings/defaults.py) keeps
# what speculation offers upstream: every request kind verifies, the batches
# the fused kernel does not carry go to upstream's code, and seeded requests
# give the tokens they give without speculation.

SPEC_FEATURES_KWARGS = (
    "enforce_eager=True, disable_log_stats=False, "
    "logits_processors=['tests.e2e.forcing_logits_processor:ForceToken'], "
    "structured_outputs_config={'backend': 'xgrammar', 'disable_any_whitespace': True}"
)

SPEC_FEATURES = SPEC_METRICS + NGRAM_PROMPTS + """
from vllm.sampling_params import StructuredOutputsParams
def verification_batches(worker):
    # The plugin's verifier counts the batches it and upstream's code took.
    rejection = getattr(worker.model_runner, "rejection_sampler", None)
    return dict(getattr(rejection, "batches", None) or {})
def batches_since(before):
    # vLLM's kernel warm-up verified batches with penalties (upstream's)
    # before any request: count from a point of the snippet on.
    now = llm.collective_rpc(verification_batches)[0]
    return {key: count - before.get(key, 0) for key, count in now.items()}
def params(**fields):
    return SamplingParams(max_tokens=48, ignore_eos=True, **fields)

# Batches the fused kernel verifies (greedy rows by argmax, seeded ones by
# matching the Sampler's draws).
kinds = {
    "greedy": params(temperature=0.0),
    "seeded_t1": params(temperature=1.0, seed=100),
    "seeded_top_k_top_p": params(temperature=0.8, top_k=20, top_p=0.9, seed=101),
    "unseeded_top_k_top_p": params(temperature=0.8, top_k=20, top_p=0.9),
}
before_requests = llm.collective_rpc(verification_batches)[0]
for name, p in kinds.items():
    info[name] = ids(llm.generate(prompts, p))
for name in ("seeded_t1", "seeded_top_k_top_p"):
    info[name + "_again"] = ids(llm.generate(prompts, kinds[name]))
info["batches_fused"] = batches_since(before_requests)

# Batches with logits processors (penalties, allowed ids, a custom one):
# seeded ones are verified by matching the Sampler's draws, which apply the
# processors; unseeded ones with top-k/top-p on upstream's canvas with the
# filters in the plugin's kernel; unseeded ones without top-k/top-p stay
# upstream's.
penalties = dict(presence_penalty=0.5, frequency_penalty=0.5, repetition_penalty=1.3)
def with_processors(suffix, **sampling):
    # Penalties, allowed ids and the forcing processor, each with `sampling`;
    # the batches each route verified.
    before = llm.collective_rpc(verification_batches)[0]
    info["penalties" + suffix] = ids(llm.generate(prompts, params(
        temperature=0.9, **penalties, **sampling)))
    info["allowed" + suffix] = ids(llm.generate(prompts, params(
        temperature=1.0, allowed_token_ids=list(range(3, 200)), **sampling)))
    info["forced" + suffix] = ids(llm.generate(prompts[:4], params(
        temperature=1.0, extra_args={"force_token_id": 77}, **sampling)))
    info["batches_processed" + suffix] = batches_since(before)
def processed():
    with_processors("_seeded", seed=7)
    with_processors("_top_k", top_k=20, top_p=0.9)
    with_processors("_plain")
phase("processed", processed)

def raw_logprobs():
    outs = llm.generate(prompts[:4], params(temperature=1.0, top_k=20, seed=10, logprobs=5))
    info["logprobs_rows"] = [
        [len(o.outputs[0].token_ids), len(o.outputs[0].logprobs),
         all(t in pos for t, pos in zip(o.outputs[0].token_ids, o.outputs[0].logprobs))]
        for o in outs]
phase("raw_logprobs", raw_logprobs)
""" + structured_outputs_phase(
    # No min_p: upstream refuses it with speculative decoding.
    '{"greedy": dict(temperature=0.0), '
    '"seeded_top_k_top_p": dict(temperature=1.0, top_k=3, top_p=0.8, seed=1), '
    '"unseeded": dict(temperature=1.3)}'
) + """if llm.llm_engine.vllm_config.speculative_config is not None:
    info["drafts"], info["accepted"], info["steps"] = acceptance()
"""

@needs_seam(shapes.REJECTION, shapes.VERIFY_STEP_OVER_UPSTREAM)
def test_the_plugins_verification_keeps_what_speculation_offers(tiny_model):
    """An engine speculating with upstream's n-gram proposer under the
    plugin's verification (the default on 0.32 and 0.33) beside one
    without speculation: greedy and seeded requests give the tokens they give
    without speculation (at least 90% of prompts: the tiny model's
    near-uniform logits can flip under a verification step's other shapes)
    and seeded ones repeat exactly; penalties, allowed ids and a custom
    logits processor hold, verified by matching where seeded, on upstream's
    canvas by the plugin's kernel where the batch uses top-k/top-p, by
    upstream's code otherwise; raw logprobs cover every token; structured
    outputs parse; drafts are accepted."""
    reference, spec = run_engines(
        (tiny_model, SPEC_FEATURES_KWARGS, SPEC_FEATURES),
        (tiny_model, f"{SPEC_FEATURES_KWARGS}, speculative_config={NGRAM_GPU!r}",
         SPEC_FEATURES),
    )
    assert spec["rejection_sampler"] == PLUGIN_VERIFYING_REJECTION_SAMPLER
    for phase_name in ("processed", "raw_logprobs", "structured_outputs"):
        for result in (reference, spec):
            assert result[phase_name + "_error"] is None, result[phase_name + "_error"]
    assert spec["drafts"] > 0 and spec["accepted"] > 0
    for name in ("greedy", "seeded_t1"):
        same = [a == b for a, b in zip(reference[name], spec[name], strict=True)]
        assert sum(same) >= 0.9 * len(same), (name, sum(same), len(same))
    for name in ("seeded_t1", "seeded_top_k_top_p"):
        assert spec[name + "_again"] == spec[name], name
    vocab = spec["vocab"]
    _assert_valid(spec["unseeded_top_k_top_p"], vocab, 48)
    for suffix in ("_seeded", "_top_k", "_plain"):
        _assert_valid(spec["penalties" + suffix], vocab, 48)
        assert all(3 <= t < 200 for row in spec["allowed" + suffix] for t in row), suffix
        assert spec["forced" + suffix] == [[77] * 48] * 4, suffix
    fused = spec["batches_fused"]
    assert fused["plugin"] > 0 and fused["upstream"] == 0, fused
    for suffix in ("_seeded", "_top_k"):
        routed = spec["batches_processed" + suffix]
        assert routed["plugin"] > 0 and routed["upstream"] == 0, (suffix, routed)
    plain = spec["batches_processed_plain"]
    assert plain["upstream"] > 0 and plain["plugin"] == 0, plain
    assert all(tokens == logprobs and covered
               for tokens, logprobs, covered in spec["logprobs_rows"]), spec["logprobs_rows"]
    assert_structured_outputs(spec["structured"])
