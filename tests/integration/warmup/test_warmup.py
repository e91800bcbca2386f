"""The start-up warm-up compiles every kernel variant the sampling steps launch.

Every Triton kernel under ``vllm_sampling_plugin.ops`` is replaced by a
recorder that computes what Triton keys a compiled binary on (constexprs,
launch options, pointer dtypes and 16-byte alignment, integers equal to 1 or
divisible by 16; a tuple argument's elements each) and runs nothing. The warm-up's keys must cover the keys of
engine-like steps: random batch sizes and mixes, draft counts and slots, on
the launch plans of an H100 (132 SMs) and a real vocabulary.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

pytest.importorskip("vllm")

from vllm_sampling_plugin.integration.warmup import sample as warmup
from vllm_sampling_plugin.integration.draw.sample import PluginSampler, Route
from vllm_sampling_plugin.integration.warmup.sample import warm_up_sampling
from vllm_sampling_plugin.ops.rejection import accept_matching_drafts
from tests.vllm_lines import needs_seam  # noqa: E402
from vllm_sampling_plugin.integration.common import shapes  # noqa: E402

pytestmark = needs_seam(shapes.DRAW, shapes.SAMPLE)

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))
from kernel_stubs import stub_ops
from tests.compile_keys import Recorder
from stub_runner import fake_ngram_speculator, fake_rejection_sampler, fake_sampler

VOCAB = 151936
MAX_NUM_REQS = 64
K = 3


@pytest.fixture
def compile_keys(monkeypatch):
    keys: set = set()
    # On the launch plans of an H100 instead of the interpreter's.
    stub_ops(lambda name, kernel: Recorder(name, kernel, keys), monkeypatch.setattr)
    return keys


def make_runner(spec_method=None, use_fp64=False, max_num_reqs=MAX_NUM_REQS, vocab=VOCAB):
    sampler = fake_sampler(max_num_reqs, vocab, use_fp64)
    runner = SimpleNamespace(
        sampler=sampler,
        device=torch.device("cpu"),
        max_num_reqs=max_num_reqs,
        rejection_sampler=None,
        speculator=None,
        input_buffers=SimpleNamespace(input_ids=torch.zeros(8, dtype=torch.int32)),
    )
    if spec_method is not None:
        runner.rejection_sampler = fake_rejection_sampler(sampler, K, spec_method)
        speculator = fake_ngram_speculator(max_num_reqs, K, max_model_len=1024)
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
            draft_tokens = input_ids[torch.arange(total)]
            target_logits = torch.empty(total, VOCAB, dtype=torch.float32)
            target_pos = torch.zeros(total, dtype=torch.int64)
            if runner.rejection_sampler.verifies_by_matching(None):
                # The Sampler's draw at every logit, each row in its request's slot.
                rows = slots.repeat_interleave(num_logits)
                for route in (Route.GUMBEL, Route.FUSED_TOP_K_TOP_P):
                    tokens = runner.sampler.draw(route, target_logits, rows, target_pos)
                accept_matching_drafts(tokens, draft_tokens, cu, K)
            else:
                runner.rejection_sampler.draw(
                    target_logits, draft_tokens, cu, slots, target_pos, None)
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
    if spec_method == "probabilistic":
        expected += ["matching_verification", "ngram"]
    elif spec_method is not None:
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


@pytest.mark.parametrize(
    "max_num_reqs,vocab,spec_method,use_fp64",
    [(64, 128256, "probabilistic", False), (256, 128256, "probabilistic", False),
     (256, 151936, "synthetic", True)],
)
def test_representatives_cover_the_compile_keys_of_every_batch_size(
        compile_keys, max_num_reqs, vocab, spec_method, use_fp64):
    """Every batch size 1 .. max_num_reqs, each route at one logit per request,
    launches only kernels whose compile keys the warm-up's launches made."""
    runner = make_runner(spec_method, use_fp64, max_num_reqs, vocab)
    warm_up_sampling(runner)
    warm_keys = set(compile_keys)
    matching = runner.rejection_sampler.verifies_by_matching(None)
    # Verifying by matching draws up to 1 + K logits per request.
    max_rows = max_num_reqs * (1 + K) if matching else max_num_reqs
    logits = torch.empty(1, vocab, dtype=torch.float32).expand(max_rows, vocab)
    slots = torch.arange(max_rows + 1, dtype=torch.int32) % max_num_reqs
    counts = torch.arange(max_num_reqs + 1, dtype=torch.int32)
    pos = torch.zeros(max_rows, dtype=torch.int64)
    fill_tokens = runner.req_states.last_sampled_tokens
    for n in range(1, max_rows + 1):
        compile_keys.clear()
        for route in (Route.GUMBEL, Route.FUSED_TOP_K_TOP_P):
            tokens = runner.sampler.draw(route, logits[:n], slots[:n], pos[:n])
        if n <= max_num_reqs:
            if matching:
                accept_matching_drafts(tokens, slots[:n], counts[:n + 1], K)
            else:
                runner.rejection_sampler.draw(logits[:n], slots[:n], counts[:n + 1],
                                              slots[:n], pos[:n], None)
            runner.speculator.draft(slots[:n], torch.ones(n, dtype=torch.int32), fill_tokens)
        missing = compile_keys - warm_keys
        assert not missing, f"batch size {n}: not warmed up: {min(missing)}"


def test_warm_up_launches_one_batch_size_per_variant(monkeypatch):
    sizes = []
    monkeypatch.setattr(PluginSampler, "draw", lambda self, route, logits, *a: sizes.append(
        (route, logits.shape[0])))
    warm_up_sampling(make_runner(None, False, max_num_reqs=256, vocab=128256))
    gumbel = [n for route, n in sizes if route is Route.GUMBEL]
    fused = [n for route, n in sizes if route is Route.FUSED_TOP_K_TOP_P]
    assert gumbel == warmup.representatives(
        256, lambda n: warmup.gumbel_variant(n, 128256, False, torch.device("cpu")))
    # Batch 1 merges in the chunk kernel, 256 rows in the merge kernel.
    assert fused[0] == 1 and len(fused) == 2
    assert len(sizes) < 256


def test_integer_class_follows_tritons_specialization():
    assert [warmup.integer_class(v) for v in (1, 16, 48, 2, 17)] == [
        "one", "multiple_of_16", "multiple_of_16", "other", "other"]


def test_wrapper_warms_up_after_vllms_dummy_sampler_run(monkeypatch):
    from vllm_sampling_plugin.integration import warmup as warmup_seam

    calls = []
    monkeypatch.setattr(warmup_seam, "warm_up", lambda runner: calls.append(("warm", runner)))
    wrapped = warmup_seam.warming_up(lambda runner, hidden: calls.append(("vllm", hidden)))
    wrapped("runner", "hidden")
    assert calls == [("vllm", "hidden"), ("warm", "runner")]
    assert wrapped.warms_up_plugin_kernels


def test_warm_up_skips_a_runner_without_the_plugin_sampler():
    assert warm_up_sampling(SimpleNamespace(sampler=object())) == []


def test_the_seam_compiles_every_variant_ahead_then_launches_them(compile_keys, monkeypatch):
    """integration/warmup/: the launches run twice, first inside
    compile_ahead (with the plugin's log lines held back), then for real;
    one line says what compiling ahead did."""
    import logging

    from vllm_sampling_plugin.integration import warmup as seam

    plugin_logger = logging.getLogger("vllm.vllm_sampling_plugin")
    lines = []

    class Keep(logging.Handler):
        def emit(self, record):
            lines.append(record.getMessage())

    handler = Keep()
    plugin_logger.addHandler(handler)
    monkeypatch.setattr(plugin_logger, "level", logging.INFO)
    ahead_keys = set()

    def compile_ahead(launches):
        assert plugin_logger.disabled
        launches()
        ahead_keys.update(compile_keys)
        compile_keys.clear()
        return len(ahead_keys)

    monkeypatch.setattr(seam, "compile_ahead", compile_ahead)
    try:
        seam.warm_up(make_runner("probabilistic"))
    finally:
        plugin_logger.removeHandler(handler)
    assert not plugin_logger.disabled
    # The real launches compile what was compiled ahead, nothing else.
    assert ahead_keys and compile_keys == ahead_keys
    assert [line.split(":")[0] for line in lines] == ["vllm-sampling-plugin warm-up"] * 2
    assert f"compiled {len(ahead_keys)} Triton kernel variants in parallel" in lines[0]
    assert "compiled and ran gumbel" in lines[1]
