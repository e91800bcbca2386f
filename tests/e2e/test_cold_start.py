"""No Triton compile of a plugin kernel once the engine has started.

The worker records every plugin kernel Triton builds after start-up
(``triton.knobs.runtime.jit_post_compile_hook`` runs on every in-memory cache
miss, disk-cache hits included); then requests of every sampling mix run at
batch sizes that shrink through every value as they finish. GPU only.
"""

from __future__ import annotations

import pytest

from tests.e2e.test_engine import run_engine, tiny_model  # noqa: F401 (fixture)
from tests.vllm_lines import needs_vllm_line

pytestmark = [
    pytest.mark.gpu,
    needs_vllm_line(
        "0.20",
        why="the 0.20 line's start-up warm-up (integration/warmup/sample.py); 0.32/0.33 "
        "have none, so their kernels compile on first use",
    ),
]

RECORD_COMPILES = """
def record_compiles(worker):
    import triton
    compiled = worker.plugin_compiles = []
    def hook(*, fn, **kwargs):
        if fn.module.startswith("vllm_sampling_plugin"):
            compiled.append(fn.name)
    triton.knobs.runtime.jit_post_compile_hook = hook
def read_compiles(worker):
    return worker.plugin_compiles
llm.collective_rpc(record_compiles)
"""

EVERY_MIX = """
import time
def prompts(n):
    return [{"prompt_token_ids": [5 + i, 17, 33, 17, 33, 90 + i]} for i in range(n)]
start = time.perf_counter()
llm.generate(prompts(1), SamplingParams(temperature=0.7, top_k=50, top_p=0.9, max_tokens=1))
info["first_top_k_top_p_s"] = time.perf_counter() - start
mixes = [
    dict(temperature=0.0),
    dict(temperature=0.8),
    dict(temperature=0.7, top_k=50, top_p=0.9),
    dict(temperature=0.7, top_k=50, top_p=0.9, seed=3),
    dict(temperature=0.0, top_k=50),
    dict(temperature=0.7, top_p=0.95, logprobs=2),
]
for mix in mixes:
    # Every request stops at a different length: the batch shrinks 16 .. 1.
    params = [SamplingParams(max_tokens=2 + 2 * i, ignore_eos=True, **mix) for i in range(16)]
    llm.generate(prompts(16), params)
info["compiled_while_serving"] = llm.collective_rpc(read_compiles)[0]
print(json.dumps(info))
"""


@pytest.mark.parametrize(
    "kwargs",
    [
        "enforce_eager=True",
        "use_fp64_gumbel=True",
        (
            "speculative_config={'method': 'ngram', 'num_speculative_tokens': 3, "
            "'prompt_lookup_min': 2, 'prompt_lookup_max': 3}"
        ),
        "logprobs_mode='processed_logprobs'",
    ],
)
def test_no_plugin_kernel_compiles_while_serving(tiny_model, kwargs):  # noqa: F811
    result = run_engine(tiny_model, kwargs, RECORD_COMPILES + EVERY_MIX)
    print(f"{kwargs}: first top-k/top-p request {result['first_top_k_top_p_s']:.3f} s")
    assert result["compiled_while_serving"] == []
