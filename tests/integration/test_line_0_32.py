"""The vLLM 0.32.x line: what register() patches and what it leaves alone,
and the Sampler subclass built the way upstream's runner builds it. (The
adaptive speculation policy's own tests run on this line too:
test_speculation_policy.py, test_decode_graphs.py.)

vLLM 0.32's own Triton kernels (temperature, penalties) do not run without a
GPU, so the sampler tests call the overridden ``_sample_random`` with logits
that upstream's processing would have produced; the plugin's kernels run in
Triton's interpreter.
"""

import pytest

from tests.integration.helpers import (
    CPU_DEVICE_SHIM,
    FLASHINFER_DECISION_IDS,
    FLASHINFER_DECISIONS,
    UPSTREAM_SAMPLER_BUILDER,
    flashinfer_decision_prelude,
    run_python,
)
from tests.vllm_lines import needs_seam, needs_vllm_line
from vllm_sampling_plugin.integration.common import shapes

# 0.31 builds its Sampler and calls _sample_random as 0.32 does.
pytestmark = needs_vllm_line("0.31", "0.32")


def test_registration_patches_the_sampler_name():
    out = run_python(
        """
        from vllm.plugins import load_general_plugins
        load_general_plugins()

        import vllm.v1.worker.gpu.model_runner as mr
        from vllm.config import ModelConfig, VllmConfig
        from vllm.engine.arg_utils import EngineArgs
        from vllm_sampling_plugin.integration.register import registration_state
        from vllm_sampling_plugin.integration.draw.sample_random import PluginRandomDrawSampler

        assert registration_state() == "active", registration_state()
        assert mr.Sampler is PluginRandomDrawSampler, mr.Sampler
        # The draw's kernels compile in the dummy sampler run (integration/warmup/).
        assert mr.GPUModelRunner._dummy_sampler_run.warms_up_plugin_kernels
        assert mr.init_speculator.__module__ == "vllm.v1.worker.gpu.spec_decode"
        # Upstream owns use_fp64_gumbel: ModelConfig stays upstream's, and so
        # does EngineArgs' field. VllmConfig is the plugin's only on 0.32,
        # whose speculator seam schedules "ngram" asynchronously
        # (test_vllm_config.py); 0.31 has no such seam.
        from vllm_sampling_plugin.integration.version import installed_vllm_version, release_line
        line = release_line(installed_vllm_version())
        assert ("_vllm_sampling_plugin_patched" in VllmConfig.__dict__) == (line == "0.32"), line
        assert not hasattr(ModelConfig, "flashinfer_sampler")
        assert EngineArgs.__dataclass_fields__["use_fp64_gumbel"].default is False
        print("ok")
        """
    )
    assert out.strip().splitlines()[-1] == "ok"


@needs_seam(shapes.REJECTION, shapes.VERIFY_STEP_OVER_UPSTREAM)
def test_registration_binds_the_verify_step_takeover():
    """Bound where the line's RejectionSampler has the verify-step shape (0.32,
    not 0.31); the plugin's verification is the line's default (an engine run
    measured it there), and --plugin-verification upstream hands back
    upstream's own RejectionSampler."""
    out = run_python(
        """
        from vllm.plugins import load_general_plugins
        load_general_plugins()

        import vllm.v1.worker.gpu.model_runner as mr
        from vllm.config import ModelConfig
        from vllm.v1.worker.gpu.spec_decode.rejection_sampler import RejectionSampler
        from vllm_sampling_plugin.integration.verification.verify_step import (
            PluginVerifyingRejectionSampler,
        )
        assert mr.RejectionSampler is PluginVerifyingRejectionSampler
        assert issubclass(PluginVerifyingRejectionSampler, RejectionSampler)
        assert ModelConfig.plugin_verification == "plugin"
        print("ok")
        """
    )
    assert out.strip().splitlines()[-1] == "ok"


@needs_seam(shapes.SPECULATOR, shapes.POLICY_OVER_UPSTREAM_NGRAM)
def test_registration_patches_the_policy_seams_over_upstreams_ngram_proposer():
    out = run_python(
        """
        from vllm.plugins import load_general_plugins
        load_general_plugins()

        import vllm.v1.worker.gpu.model_runner as mr
        from vllm.engine.arg_utils import EngineArgs
        from vllm_sampling_plugin.integration.register import registration_state

        assert registration_state() == "active", registration_state()
        # The adaptive speculation policy over upstream's n-gram proposer
        # (integration/speculator/): the proposer reports its counts, the runner
        # sends them, the scheduler reads them.
        import vllm.v1.worker.gpu.spec_decode.ngram.speculator as ngram
        from vllm.v1.core.sched.scheduler import Scheduler
        assert ngram.NgramGPUSpeculator.__name__ == "ReportingNgramGPUSpeculator"
        assert Scheduler.__dict__["_vllm_sampling_plugin_patched"]
        assert mr.GPUModelRunner.sample_tokens.__code__.co_filename.endswith("proposal_report.py")
        # EngineArgs learns only speculation_policy and plugin_verification,
        # as keywords.
        fields = EngineArgs.__dataclass_fields__
        assert "speculation_policy" not in fields
        assert "plugin_verification" not in fields
        args = EngineArgs(model="m", use_fp64_gumbel=True, speculation_policy="fixed",
                          plugin_verification="plugin")
        assert (args.use_fp64_gumbel, args.speculation_policy) == (True, "fixed")
        assert args.plugin_verification == "plugin"
        assert EngineArgs(model="m").plugin_verification == "plugin"
        print("ok")
        """
    )
    assert out.strip().splitlines()[-1] == "ok"


# The upstream sampler on the CPU (helpers.UPSTREAM_SAMPLER_BUILDER), and
# draw(), which calls the overridden _sample_random the way upstream's
# Sampler.sample does in 0.32.
SAMPLER_PRELUDE = (
    CPU_DEVICE_SHIM
    + """
import os
os.environ["TRITON_INTERPRET"] = "1"
"""
    + UPSTREAM_SAMPLER_BUILDER
    + """
def draw(sampler, logits, slots, pos):
    idx = torch.tensor(slots, dtype=torch.int32)
    idx_np = np.array(slots)
    top_k, top_p = sampler.sampling_states.get_top_k_top_p(idx, idx_np)
    return sampler._sample_random(
        logits, idx, idx_np, torch.tensor(pos, dtype=torch.int64), top_k, top_p,
        False,
    )
"""
)


@pytest.mark.parametrize("fp64", [False, True])
def test_sampler_builds_from_upstream_arguments_and_keeps_their_settings(fp64):
    out = run_python(
        f"""
        from vllm_sampling_plugin.integration.draw.sample_random import PluginRandomDrawSampler
        sampler = build_sampler(use_fp64_gumbel={fp64})
        assert type(sampler) is PluginRandomDrawSampler
        assert sampler.use_fp64_gumbel is {fp64}
        # Upstream's own state, processors and FlashInfer decision are kept.
        assert [type(p).__name__ for p in sampler.logits_processors] == [
            "LogitBiasState", "PenaltiesState", "BadWordsState"]
        assert sampler.use_flashinfer is False  # no CUDA platform here
        print("ok")
        """,
        prelude=SAMPLER_PRELUDE,
    )
    assert out.strip().splitlines()[-1] == "ok"


def test_draw_is_greedy_top_k_bounded_and_seeded_batch_invariant():
    out = run_python(
        """
        sampler = build_sampler()
        sampler.add_request(0, SamplingParams(temperature=0.0))
        sampler.add_request(1, SamplingParams(temperature=1.0, top_k=3, seed=11))
        sampler.add_request(2, SamplingParams(temperature=1.0, seed=7))
        sampler.add_request(3, SamplingParams(temperature=1.0, seed=7))
        sampler.apply_staged_writes()

        # All four rows: the top-k row sends the batch to the fused kernel.
        mixed, returned = draw(sampler, LOGITS[:4].clone(), [0, 1, 2, 3], [5] * 4)
        assert returned.shape == (4, VOCAB)
        assert mixed[0] == LOGITS[0].argmax()
        assert int(mixed[1]) in LOGITS[1].topk(3).indices.tolist()

        # Seeded row 2 alone goes through the plain Gumbel kernel and must
        # draw the same token as beside the top-k row.
        alone, _ = draw(sampler, LOGITS[2:3].clone(), [2], [5])
        assert alone[0] == mixed[2], (alone, mixed)
        # Same seed and position, different logits row: the noise is the
        # seed's, so the same logits give the same token.
        twin, _ = draw(sampler, LOGITS[2:3].clone(), [3], [5])
        assert twin[0] == alone[0]
        print("ok")
        """,
        prelude=SAMPLER_PRELUDE,
        timeout=600,
    )
    assert out.strip().splitlines()[-1] == "ok"


def test_fp64_draw_is_upstreams_own():
    """``use_fp64_gumbel``: the plugin's draw gives upstream's tokens (its
    murmur3 FP64 noise), greedy and seeded rows alike. Upstream's own
    ``_sample_random`` runs its Triton kernel in the interpreter, for which
    vLLM's triton_utils needs CUDA_VISIBLE_DEVICES empty (else it installs a
    placeholder)."""
    out = run_python(
        """
        from vllm.v1.worker.gpu.sample.sampler import Sampler
        sampler = build_sampler(use_fp64_gumbel=True)
        # Slot 0 greedy, the other seven seeded at several temperatures.
        for slot in range(MAX_REQS):
            temperature = 0.0 if slot == 0 else 0.5 + 0.2 * slot
            sampler.add_request(slot, SamplingParams(temperature=temperature, seed=11 * slot))
        sampler.apply_staged_writes()
        slots, pos = list(range(MAX_REQS)), [5 + 3 * slot for slot in range(MAX_REQS)]
        ours, _ = draw(sampler, LOGITS.clone(), slots, pos)
        theirs, _ = Sampler._sample_random(
            sampler, LOGITS.clone(), torch.tensor(slots, dtype=torch.int32), np.array(slots),
            torch.tensor(pos, dtype=torch.int64), None, None, False,
        )
        assert ours.tolist() == theirs.tolist(), (ours, theirs)
        print("ok")
        """,
        prelude=SAMPLER_PRELUDE,
        env={"CUDA_VISIBLE_DEVICES": ""},
        timeout=600,
    )
    assert out.strip().splitlines()[-1] == "ok"


@pytest.mark.parametrize("speculative", [False, True], ids=["no_speculation", "ngram"])
def test_fp32_draw_is_upstreams_own_when_the_engine_speculates(speculative):
    """FP32: with a speculative config (upstream's RejectionSampler then draws
    the steps with drafts, with upstream's noise) the plugin's draw gives
    upstream's own FP32 tokens; without one it keeps the plugin's Philox
    stream, other tokens on these flat logits."""
    out = run_python(
        f"""
        from vllm.config import SpeculativeConfig
        from vllm.v1.worker.gpu.sample.sampler import Sampler
        vllm_config = VllmConfig()
        if {speculative}:
            vllm_config.speculative_config = SpeculativeConfig(
                method="ngram", num_speculative_tokens=3, prompt_lookup_max=3,
                prompt_lookup_min=2,
            )
        sampler = build_sampler(vllm_config=vllm_config)
        assert sampler.fp32_stream == ("murmur3" if {speculative} else "philox")
        # Slot 0 greedy, the other seven seeded; temperature 1 (0.32's
        # temperature kernel does not run on the CPU).
        for slot in range(MAX_REQS):
            sampler.add_request(
                slot, SamplingParams(temperature=0.0 if slot == 0 else 1.0, seed=11 * slot)
            )
        sampler.apply_staged_writes()
        slots, pos = list(range(MAX_REQS)), [5 + 3 * slot for slot in range(MAX_REQS)]
        logits = LOGITS * 0.3  # flat: the noise decides
        ours, _ = draw(sampler, logits.clone(), slots, pos)
        theirs, _ = Sampler._sample_random(
            sampler, logits.clone(), torch.tensor(slots, dtype=torch.int32), np.array(slots),
            torch.tensor(pos, dtype=torch.int64), None, None, False,
        )
        assert (ours.tolist() == theirs.tolist()) is {speculative}, (ours, theirs)
        print("ok")
        """,
        prelude=SAMPLER_PRELUDE,
        env={"CUDA_VISIBLE_DEVICES": ""},
        timeout=600,
    )
    assert out.strip().splitlines()[-1] == "ok"


@pytest.mark.parametrize("fp64", [False, True])
def test_warm_up_launches_every_compile_variant_of_the_draw(fp64):
    """The start-up warm-up runs both draw kernels at one batch size per
    compile variant (here, CPU: one program per row, so every size from 1 to
    max_num_reqs has the Gumbel plan of 1) and logs one line."""
    out = run_python(
        f"""
        import logging
        from vllm_sampling_plugin.integration.common.compile_variants import (
            fused_top_k_top_p_variant, gumbel_variant, representatives)
        from vllm_sampling_plugin.integration.warmup import warm_up_plugin_draw
        records = []
        handler = logging.Handler()
        handler.emit = records.append
        plugin_logger = logging.getLogger("vllm.vllm_sampling_plugin")
        plugin_logger.addHandler(handler)
        plugin_logger.setLevel(logging.INFO)  # QUIET_ENV runs vLLM at ERROR
        sampler = build_sampler(use_fp64_gumbel={fp64})
        launched = warm_up_plugin_draw(sampler, MAX_REQS, CPU, (torch.float32, torch.bfloat16))
        assert launched == {{
            "gumbel": representatives(MAX_REQS, lambda n: gumbel_variant(n, VOCAB, {fp64}, CPU)),
            "fused_top_k_top_p": representatives(
                MAX_REQS, lambda n: fused_top_k_top_p_variant(n, VOCAB)),
        }}, launched
        assert launched["gumbel"] and launched["fused_top_k_top_p"]
        lines = [r.getMessage() for r in records if "warm-up" in r.getMessage()]
        assert len(lines) == 1 and ("FP64 (murmur3)" if {fp64} else "FP32") in lines[0], lines
        assert "float32 and bfloat16 logits" in lines[0], lines
        # Not the plugin's sampler (a watermarked engine): nothing runs.
        assert warm_up_plugin_draw(object(), MAX_REQS, CPU) == {{}}
        print("ok")
        """,
        prelude=SAMPLER_PRELUDE,
        timeout=600,
    )
    assert out.strip().splitlines()[-1] == "ok"


def test_sampling_mask_request_returns_the_masked_logits():
    out = run_python(
        """
        sampler = build_sampler(return_sampling_mask=True)
        sampler.add_request(0, SamplingParams(temperature=1.0, top_k=2, seed=1))
        sampler.apply_staged_writes()
        sampled, returned = draw(sampler, LOGITS[:1].clone(), [0], [0])
        kept = torch.isfinite(returned[0]).nonzero().flatten().tolist()
        assert sorted(kept) == sorted(LOGITS[0].topk(2).indices.tolist()), kept
        assert int(sampled[0]) in kept
        print("ok")
        """,
        prelude=SAMPLER_PRELUDE,
        timeout=600,
    )
    assert out.strip().splitlines()[-1] == "ok"


@pytest.mark.parametrize(
    "env_value, keeps_flashinfer, note", FLASHINFER_DECISIONS, ids=FLASHINFER_DECISION_IDS
)
def test_flashinfer_batches_are_the_plugins_unless_the_user_asks_for_flashinfer(
    env_value, keeps_flashinfer, note
):
    """The 0.20 line's tri-state on upstream's variable: unset, the plugin's
    fused kernel takes the seedless top-k/top-p batches upstream would give
    FlashInfer; ``1`` keeps them FlashInfer's. One log line says which."""
    out = run_python(
        f"""
        import vllm_sampling_plugin.integration.draw.plugin_draw as draw_module
        routes = []
        def fake_flashinfer(logits, top_k, top_p):
            routes.append("flashinfer")
            return torch.zeros(logits.shape[0], dtype=torch.int32)
        upstream.flashinfer_sample = fake_flashinfer
        fused = draw_module.top_k_top_p_sample
        def spy_fused(*args, **kwargs):
            routes.append("fused")
            return fused(*args, **kwargs)
        draw_module.top_k_top_p_sample = spy_fused

        sampler = build_sampler()
        assert sampler.use_flashinfer is {keeps_flashinfer}
        assert {note!r} in decision_line(), decision_line()
        sampler.add_request(0, SamplingParams(temperature=1.0, top_k=5))
        sampler.apply_staged_writes()
        idx = torch.tensor([0], dtype=torch.int32)
        sampled, _ = sampler.sample(
            torch.randn(1, VOCAB), idx, idx, np.array([0]), torch.tensor([0]),
            torch.zeros(1, dtype=torch.int32), torch.zeros(1, dtype=torch.int32),
            np.array([1]),
        )
        assert routes == [{"'flashinfer'" if keeps_flashinfer else "'fused'"}], routes
        assert 0 <= int(sampled[0]) < VOCAB
        print("ok")
        """,
        prelude=SAMPLER_PRELUDE + flashinfer_decision_prelude(env_value),
    )
    assert out.strip().splitlines()[-1] == "ok"


def test_flashinfer_batches_stay_upstream():
    out = run_python(
        """
        import vllm.v1.worker.gpu.sample.sampler as upstream
        calls = []
        def fake_flashinfer(logits, top_k, top_p):
            calls.append(logits.shape)
            return torch.zeros(logits.shape[0], dtype=torch.int32)
        upstream.flashinfer_sample = fake_flashinfer
        sampler = build_sampler()
        sampler.use_flashinfer = True  # as upstream decides on a supported GPU
        sampler.add_request(0, SamplingParams(temperature=1.0, top_k=5))
        sampler.apply_staged_writes()
        idx = torch.tensor([0], dtype=torch.int32)
        top_k, top_p = sampler.sampling_states.get_top_k_top_p(idx, np.array([0]))
        sampled, _ = sampler._sample_random(
            LOGITS[:1].clone(), idx, np.array([0]), torch.tensor([0]), top_k, top_p,
            True,
        )
        assert calls == [(1, VOCAB)] and sampled.dtype == torch.int64
        print("ok")
        """,
        prelude=SAMPLER_PRELUDE,
    )
    assert out.strip().splitlines()[-1] == "ok"
