"""vLLM 0.20's V2 runner with the plugin, end to end, on a tiny random Llama.

Every scenario starts its own engine in a fresh interpreter (as a user would:
only the entry points load the plugin) and prints one JSON line with what it
saw. The engines use little GPU memory, so scenarios can run side by side
(``pytest -k`` groups in parallel shells). GPU only (see tests/conftest.py).
"""

from __future__ import annotations

import json

import pytest

from tests.integration.helpers import run_python
from tests.tiny_model import write_tiny_llama
from tests.vllm_lines import needs_vllm_line

pytestmark = [
    pytest.mark.gpu,
    needs_vllm_line(
        "0.20",
        why="the 0.20 line's PluginSampler, PluginRejectionSampler and n-gram speculator; "
        "0.32/0.33: tests/e2e/test_engine_upstream_sampler_lines.py",
    ),
]

PROBE_RUNNER = """
def probe(worker):
    runner = worker.model_runner
    spec = getattr(runner, "speculator", None)
    rs = getattr(runner, "rejection_sampler", None)
    return {
        "sampler": type(runner.sampler).__module__ + "." + type(runner.sampler).__name__,
        "rejection_sampler": None if rs is None else type(rs).__module__ + "." + type(rs).__name__,
        "speculator": None if spec is None else type(spec).__name__,
        "fp64": runner.sampler.use_fp64_gumbel,
        "flashinfer": runner.sampler.use_flashinfer,
    }
"""

ENGINE = """
import json, os
from vllm import LLM, SamplingParams
{probe}
llm = LLM(model={model!r}, load_format="dummy", attention_backend="TRITON_ATTN",
          gpu_memory_utilization=0.12, max_model_len=1024, max_num_seqs=16,
          seed=0, {kwargs})
info = llm.collective_rpc(probe)[0]
"""


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> str:
    return str(write_tiny_llama(tmp_path_factory.mktemp("tiny")))


def run_engine(model: str, kwargs: str, body: str, env: dict[str, str] | None = None) -> dict:
    code = ENGINE.format(probe=PROBE_RUNNER, model=model, kwargs=kwargs) + body
    # collective_rpc ships the probe function to the engine process by pickle.
    env = {"VLLM_USE_V2_MODEL_RUNNER": "1", "VLLM_ALLOW_INSECURE_SERIALIZATION": "1", **(env or {})}
    out = run_python(code, env=env, timeout=900)
    result = json.loads(out.strip().splitlines()[-1])
    print(json.dumps(result, indent=1))
    return result


GENERATE = """
prompts = [{"prompt_token_ids": [5 + i, 17, 33, 17, 33, 17, 33, 90 + i]} for i in range(8)]
# ignore_eos: the dummy weights make every token, EOS included, about as likely.
greedy = llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True))
random_ = llm.generate(prompts, SamplingParams(temperature=1.0, top_p=0.9, top_k=40,
                                               max_tokens=24, seed=7, ignore_eos=True))
unseeded = llm.generate(prompts, SamplingParams(temperature=0.8, top_k=50, max_tokens=24,
                                                ignore_eos=True))
vocab = llm.llm_engine.model_config.get_vocab_size()
def ids(outs):
    return [list(o.outputs[0].token_ids) for o in outs]
info.update(greedy=ids(greedy), random=ids(random_), unseeded=ids(unseeded), vocab=vocab)
print(json.dumps(info))
"""


def _assert_generated(result: dict) -> None:
    for kind in ("greedy", "random", "unseeded"):
        rows = result[kind]
        assert len(rows) == 8 and all(len(r) == 24 for r in rows), kind
        assert all(0 <= t < result["vocab"] for r in rows for t in r), kind


@pytest.mark.parametrize("fp64", [False, True])
def test_sampler_is_the_plugins_and_generates(tiny_model, fp64):
    result = run_engine(
        tiny_model,
        f"enforce_eager=True, use_fp64_gumbel={fp64}",
        GENERATE,
    )
    assert result["sampler"] == "vllm_sampling_plugin.integration.draw.sample.PluginSampler"
    assert result["fp64"] is fp64
    _assert_generated(result)


def test_sampler_in_process_engine_with_flashinfer_forced(tiny_model):
    """VLLM_ENABLE_V1_MULTIPROCESSING=0: the plugin loads in the caller."""
    result = run_engine(
        tiny_model,
        "enforce_eager=True",
        GENERATE,
        env={"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_USE_FLASHINFER_SAMPLER": "1"},
    )
    assert result["sampler"].endswith("PluginSampler")
    assert result["flashinfer"] is True
    _assert_generated(result)


SPEC_METRICS = """
def counter(name):
    return sum(m.value for m in llm.get_metrics() if m.name == name and hasattr(m, "value"))
def acceptance():
    drafts = counter("vllm:spec_decode_num_draft_tokens")
    accepted = counter("vllm:spec_decode_num_accepted_tokens")
    steps = counter("vllm:spec_decode_num_drafts")
    return drafts, accepted, steps
"""

NGRAM_PROMPTS = """
import random, time
rng = random.Random(0)
prompts = []
for i in range(24):
    motif = [rng.randrange(3, 1000) for _ in range(rng.randrange(3, 7))]
    prompts.append({"prompt_token_ids": [rng.randrange(3, 1000)] + motif * 6})
params = SamplingParams(temperature=0.0, max_tokens=48, ignore_eos=True)
"""


TIMED_GENERATE = """
llm.generate(prompts[:2], params)  # warm-up
start = time.perf_counter()
outs = llm.generate(prompts, params)
elapsed = time.perf_counter() - start
info["tokens"] = [list(o.outputs[0].token_ids) for o in outs]
info["tokens_per_s"] = sum(len(t) for t in info["tokens"]) / elapsed
# Seeded random sampling: n-gram drafts are verified by matching the
# sampler's own (seed, position) draws, so speculation keeps these tokens too.
seeded = [SamplingParams(temperature=0.9, top_p=0.9, seed=100 + i, max_tokens=48,
                         ignore_eos=True) for i in range(len(prompts))]
info["seeded"] = [list(o.outputs[0].token_ids) for o in llm.generate(prompts, seeded)]
"""


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_ngram_speculation_matches_greedy_without_speculation(tiny_model, async_scheduling):
    """CUDA graphs on (no enforce_eager)."""
    reference = run_engine(
        tiny_model,
        f"async_scheduling={async_scheduling}",
        NGRAM_PROMPTS + TIMED_GENERATE + """
print(json.dumps(info))
""",
    )
    spec = run_engine(
        tiny_model,
        "speculative_config={'method': 'ngram', 'num_speculative_tokens': 3, "
        "'prompt_lookup_min': 2, 'prompt_lookup_max': 3}, "
        f"async_scheduling={async_scheduling}, disable_log_stats=False",
        SPEC_METRICS + NGRAM_PROMPTS + TIMED_GENERATE + """
info["async"] = llm.llm_engine.vllm_config.scheduler_config.async_scheduling
info["drafts"], info["accepted"], info["steps"] = acceptance()
print(json.dumps(info))
""",
    )
    assert spec["speculator"] == "NgramProposerGPU"
    assert spec["rejection_sampler"].endswith("PluginRejectionSampler")
    assert spec["async"] is async_scheduling
    assert spec["drafts"] > 0 and spec["accepted"] > 0
    same = [a == b for a, b in zip(reference["tokens"], spec["tokens"])]
    diverged = [
        (i, next(j for j, (x, y) in enumerate(zip(a, b)) if x != y))
        for i, (a, b) in enumerate(zip(reference["tokens"], spec["tokens"]))
        if a != b
    ]
    print(
        f"async={async_scheduling}: {reference['tokens_per_s']:.0f} tok/s without "
        f"speculation, {spec['tokens_per_s']:.0f} tok/s with n-gram; "
        f"acceptance rate {spec['accepted'] / spec['drafts']:.3f} "
        f"({spec['accepted']}/{spec['drafts']} drafts); "
        f"{sum(same)}/{len(same)} prompts identical; first divergence "
        f"(prompt, token index): {diverged}"
    )
    assert sum(same) >= 0.9 * len(same)
    same_seeded = sum(a == b for a, b in zip(reference["seeded"], spec["seeded"]))
    print(f"seeded: {same_seeded}/{len(same)} prompts identical with and without n-gram")
    assert same_seeded >= 0.9 * len(same)


@pytest.mark.parametrize("method", ["synthetic", "probabilistic"])
def test_spec_decode_rejection_methods(tiny_model, method):
    """Both run on n-gram drafts (no draft logits). Probabilistic runs greedy
    rows, where a draft is accepted when it is the target's argmax: the tiny
    model's dummy weights give near-uniform sampling distributions, on which
    random rows would accept almost nothing."""
    extra = (
        "'rejection_sample_method': 'synthetic', 'synthetic_acceptance_length': 2.5"
        if method == "synthetic"
        else "'rejection_sample_method': 'probabilistic'"
    )
    temperature = 0.8 if method == "synthetic" else 0.0
    result = run_engine(
        tiny_model,
        "enforce_eager=True, disable_log_stats=False, speculative_config={'method': 'ngram', "
        f"'num_speculative_tokens': 3, 'prompt_lookup_min': 2, 'prompt_lookup_max': 3, {extra}}}",
        SPEC_METRICS + NGRAM_PROMPTS + f"""
params = SamplingParams(temperature={temperature}, max_tokens=64, ignore_eos=True, seed=3)
"""
        + """
outs = llm.generate(prompts, params)
info["drafts"], info["accepted"], info["steps"] = acceptance()
info["lengths"] = [len(o.outputs[0].token_ids) for o in outs]
print(json.dumps(info))
""",
    )
    assert result["rejection_sampler"].endswith("PluginRejectionSampler")
    assert all(n == 64 for n in result["lengths"])
    # Mean acceptance length = 1 + accepted drafts per verification step.
    mean_length = 1 + result["accepted"] / max(result["steps"], 1)
    print(f"{method}: mean acceptance length {mean_length:.3f}")
    if method == "synthetic":
        # Rates [1.0, 0.5, 0.0] give exactly 2.5 in expectation; the bound
        # allows for steps truncated near max_tokens.
        assert abs(mean_length - 2.5) < 0.2, mean_length
    else:
        assert result["accepted"] > 0
