"""The start-up warm-up compiles every kernel variant the sampling steps launch.

Every Triton kernel under ``vllm_sampling_plugin.ops`` is replaced by a
recorder that computes what Triton keys a compiled binary on (constexprs,
launch options, pointer dtypes and 16-byte alignment, integers equal to 1 or
divisible by 16) and runs nothing. The warm-up's keys must cover the keys of
engine-like steps: random batch sizes and mixes, draft counts and slots, on
the launch plans of an H100 (132 SMs) and a real vocabulary.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from types import SimpleNamespace

import numpy as np
import pytest
import torch

pytest.importorskip("vllm")

import vllm_sampling_plugin.ops as ops_pkg
from vllm_sampling_plugin.integration import warmup
from vllm_sampling_plugin.integration.ngram_speculator import NgramProposerGPU
from vllm_sampling_plugin.integration.rejection_sampler import (
    PluginRejectionSampler,
)
from vllm_sampling_plugin.integration.sampler import (
    PluginSampler,
    PluginSamplingStates,
    Route,
)
from vllm_sampling_plugin.integration.warmup import warm_up_sampling
from tests.vllm_lines import needs_vllm_line  # noqa: E402

pytestmark = needs_vllm_line("0.20")

VOCAB = 151936
MAX_NUM_REQS = 64
K = 3
H100_SMS = 132


class Recorder:
    """Stands in for a Triton kernel: ``kernel[grid](...)`` records a compile key."""

    def __init__(self, name, fn, keys):
        self.name = name
        self.signature = inspect.signature(fn)
        self.do_not_specialize = set(getattr(fn, "do_not_specialize", ()) or ())
        self.keys = keys

    def __getitem__(self, grid):
        return self.launch

    def launch(self, *args, num_warps=4, num_stages=3, **kwargs):
        bound = self.signature.bind(*args, **kwargs)
        key = [self.name, ("num_warps", num_warps), ("num_stages", num_stages)]
        for name, value in bound.arguments.items():
            annotation = self.signature.parameters[name].annotation
            if "constexpr" in str(annotation):
                key.append((name, value))
            elif isinstance(value, torch.Tensor):
                key.append((name, value.dtype, value.data_ptr() % 16 == 0))
            elif isinstance(value, bool) or value is None:
                key.append((name, value))
            elif isinstance(value, int) and name not in self.do_not_specialize:
                key.append((name, "one" if value == 1 else value % 16 == 0))
            else:
                key.append((name, type(value).__name__))
        self.keys.add(tuple(key))


@pytest.fixture
def compile_keys(monkeypatch):
    keys: set = set()
    for info in pkgutil.walk_packages(ops_pkg.__path__, ops_pkg.__name__ + "."):
        module = importlib.import_module(info.name)
        for name, obj in list(vars(module).items()):
            fn = getattr(obj, "fn", None)
            if name.endswith("_kernel") and callable(fn) and hasattr(obj, "__getitem__"):
                recorder = Recorder(name, fn, keys)
                recorder.do_not_specialize |= set(
                    getattr(obj, "do_not_specialize", ()) or ()
                )
                monkeypatch.setattr(module, name, recorder)
    # The launch plans of an H100 instead of the interpreter's.
    for info in pkgutil.walk_packages(ops_pkg.__path__, ops_pkg.__name__ + "."):
        module = importlib.import_module(info.name)
        for name, obj in list(vars(module).items()):
            if "num_sms" in name and callable(obj):
                monkeypatch.setattr(module, name, lambda device: H100_SMS)
    return keys


def state(values, dtype):
    return SimpleNamespace(np=np.array(values), gpu=torch.tensor(values, dtype=dtype))


def make_runner(spec_method=None, use_fp64=False):
    states = object.__new__(PluginSamplingStates)
    states.vocab_size = VOCAB
    states.temperature = state([0.7] * MAX_NUM_REQS, torch.float32)
    states.seeds = state(list(range(MAX_NUM_REQS)), torch.int64)
    states.top_k = state([50] * MAX_NUM_REQS, torch.int32)
    states.top_p = state([0.9] * MAX_NUM_REQS, torch.float32)
    sampler = object.__new__(PluginSampler)
    sampler.sampling_states = states
    sampler.use_flashinfer = False
    sampler.use_fp64_gumbel = use_fp64
    runner = SimpleNamespace(
        sampler=sampler,
        device=torch.device("cpu"),
        max_num_reqs=MAX_NUM_REQS,
        rejection_sampler=None,
        speculator=None,
        input_buffers=SimpleNamespace(input_ids=torch.zeros(8, dtype=torch.int32)),
    )
    if spec_method is not None:
        rejection = object.__new__(PluginRejectionSampler)
        rejection.sampler = sampler
        rejection.num_speculative_steps = K
        rejection.rejection_sample_method = spec_method
        rejection.synthetic_mode = spec_method == "synthetic"
        rejection.synthetic_conditional_rates = (
            torch.full((K,), 0.5) if rejection.synthetic_mode else None
        )
        runner.rejection_sampler = rejection
        speculator = object.__new__(NgramProposerGPU)
        speculator.min_n, speculator.max_n, speculator.k = 2, 4, K
        speculator.drafts = torch.zeros(MAX_NUM_REQS, K, dtype=torch.int64)
        speculator.num_drafts = torch.zeros(MAX_NUM_REQS, dtype=torch.int32)
        speculator.scratch = torch.zeros(MAX_NUM_REQS, 64, dtype=torch.int64)
        speculator.req_states = SimpleNamespace(
            all_token_ids=SimpleNamespace(gpu=torch.zeros(MAX_NUM_REQS, 1024, dtype=torch.int32)),
            total_len=SimpleNamespace(gpu=torch.zeros(MAX_NUM_REQS, dtype=torch.int32)),
            max_model_len=1024,
            last_sampled_tokens=torch.zeros(MAX_NUM_REQS, 1, dtype=torch.int64),
        )
        runner.speculator = speculator
        runner.req_states = speculator.req_states
    return runner


def engine_steps(runner, rng, num_steps=40):
    """Launch what steps of random batches launch; sizes are drawn to cover 1..max."""
    sizes = [1, 2, 3, 4, MAX_NUM_REQS, *rng.integers(1, MAX_NUM_REQS + 1, num_steps)]
    for n in sizes:
        n = int(n)
        slots = torch.from_numpy(rng.permutation(MAX_NUM_REQS)[:n].astype(np.int32))
        # apply_sampling_params hands over a fresh FP32 copy of the logits.
        logits = torch.empty(n, VOCAB, dtype=torch.float32)
        pos = torch.from_numpy(rng.integers(0, 1000, n)).to(torch.int64)
        for route in (Route.GUMBEL, Route.FUSED_TOP_K_TOP_P):
            runner.sampler.draw(route, logits, slots, pos)
        if runner.rejection_sampler is not None:
            num_logits = torch.from_numpy(rng.integers(1, K + 2, n).astype(np.int32))
            cu = torch.zeros(n + 1, dtype=torch.int32)
            cu[1:] = torch.cumsum(num_logits, 0)
            total = int(cu[-1])
            input_ids = torch.zeros(64 + total, dtype=torch.int32)
            runner.rejection_sampler.draw(
                torch.empty(total, VOCAB, dtype=torch.float32),
                input_ids[torch.arange(total)],
                cu,
                slots,
                torch.zeros(total, dtype=torch.int64),
                None,
            )
            runner.speculator.draft(
                slots, torch.ones(n, dtype=torch.int32), runner.req_states.last_sampled_tokens
            )


@pytest.mark.parametrize(
    "spec_method,use_fp64",
    [(None, False), (None, True), ("probabilistic", False), ("synthetic", True)],
)
def test_warm_up_covers_every_step_variant(compile_keys, spec_method, use_fp64):
    runner = make_runner(spec_method, use_fp64)
    warmed = warm_up_sampling(runner)
    expected = ["gumbel", "fused_top_k_top_p"]
    if spec_method is not None:
        expected += [f"rejection_{spec_method}", "ngram"]
    assert warmed == expected
    warm_keys = set(compile_keys)
    names = {key[0] for key in warm_keys}
    assert {"_gumbel_partial_kernel", "_reduce_chunks_kernel", "_top_k_top_p_kernel",
            "_merge_kernel"} <= names
    # Batch size changes the plans: several variants per kernel are needed.
    assert sum(key[0] == "_reduce_chunks_kernel" for key in warm_keys) > 1

    compile_keys.clear()
    engine_steps(runner, np.random.default_rng(0))
    missing = compile_keys - warm_keys
    assert not missing, f"{len(missing)} step variants not warmed up, e.g. {min(missing)}"


def test_wrapper_warms_up_after_vllms_dummy_sampler_run(monkeypatch):
    calls = []
    monkeypatch.setattr(warmup, "warm_up_sampling", lambda runner: calls.append(("warm", runner)))
    wrapped = warmup.warming_up_sampling(lambda runner, hidden: calls.append(("vllm", hidden)))
    wrapped("runner", "hidden")
    assert calls == [("vllm", "hidden"), ("warm", "runner")]
    assert wrapped.warms_up_sampling


def test_warm_up_skips_a_runner_without_the_plugin_sampler():
    assert warm_up_sampling(SimpleNamespace(sampler=object())) == []
