"""The vLLM 0.33.x line: register() patches exactly the runner's Sampler
name and the adaptive speculation policy's seams, upstream's n-gram proposer
reports how many drafts it found, the subclass builds from upstream's own
constructor arguments, and upstream's own ``Sampler.sample`` calls the
override with 0.33's ``_sample_random`` signature and gets the plugin's
routes.

vLLM 0.33's Triton kernels for temperature and min-p do not run without a
GPU, so the requests here use temperature 0 or 1 and no min-p; everything
else in ``sample`` (logits processors, ``get_top_k_top_p`` with its third
value, the FlashInfer decision) is upstream's code running on the CPU, and
the plugin's kernels run in Triton's interpreter.
"""

import pytest

from tests.vllm_lines import skip_module_unless_line

# 0.34 keeps 0.33's draw, warm-up and n-gram proposer.
skip_module_unless_line("0.33", "0.34")  # before anything imports their internals

from tests.integration.helpers import (  # noqa: E402
    CPU_DEVICE_SHIM,
    FLASHINFER_DECISION_IDS,
    FLASHINFER_DECISIONS,
    UPSTREAM_SAMPLER_BUILDER,
    flashinfer_decision_prelude,
    run_python,
)

# Triton 3.8 (vLLM 0.33's) decides interpreter mode when triton is imported,
# which the CPU shim's vLLM import already does: set it in the environment.
INTERPRET = {"TRITON_INTERPRET": "1"}


def test_registration_patches_exactly_the_sampler_name_and_the_policy_seams():
    out = run_python(
        """
        import inspect
        import vllm.engine.arg_utils as arg_utils
        import vllm.v1.worker.gpu.model_runner as mr
        import vllm.v1.worker.gpu.sample.sampler as upstream
        import vllm.v1.worker.gpu.sample.states as states
        import vllm.v1.worker.gpu.spec_decode as spec_decode
        import vllm.v1.worker.gpu.spec_decode.ngram.speculator as ngram
        import vllm.v1.worker.gpu.spec_decode.rejection_sampler as rejection
        from vllm.config import ModelConfig, VllmConfig
        from vllm.v1.core.sched.async_scheduler import AsyncScheduler
        from vllm.v1.core.sched.scheduler import Scheduler
        from vllm.v1.request import Request
        from vllm.v1.worker.gpu.cudagraph_utils import ModelCudaGraphManager

        modules = [mr, upstream, states, spec_decode, ngram, rejection, arg_utils]
        classes = [mr.GPUModelRunner, upstream.Sampler, states.SamplingStates,
                   rejection.RejectionSampler, arg_utils.EngineArgs,
                   arg_utils.AsyncEngineArgs, ModelConfig, VllmConfig, Scheduler,
                   AsyncScheduler, Request, ModelCudaGraphManager,
                   ngram.NgramGPUSpeculator]
        before = {m.__name__: dict(vars(m)) for m in modules}
        before |= {c.__qualname__: dict(vars(c)) for c in classes}

        from vllm.plugins import load_general_plugins
        load_general_plugins()

        from vllm_sampling_plugin.integration.register import registration_state
        from vllm_sampling_plugin.integration.draw.sample_random import PluginRandomDrawSampler
        assert registration_state() == "active", registration_state()

        after = {m.__name__: dict(vars(m)) for m in modules}
        after |= {c.__qualname__: dict(vars(c)) for c in classes}
        changed = sorted(
            f"{owner}.{name}"
            for owner in before
            for name in before[owner].keys() | after[owner].keys()
            if before[owner].get(name, None) is not after[owner].get(name, None)
        )
        # The Sampler name, and the dummy sampler run, which now also warms
        # the plugin's draw kernels up (integration/warmup/); the adaptive
        # speculation policy's seams (integration/speculator/): the runner's
        # output and its plan, the scheduler, the target model's graph candidates, the
        # n-gram proposer's name and the line's default policy for
        # ModelConfigs built elsewhere (EngineArgs learned
        # speculation_policy earlier, at platform discovery: integration/settings/early.py).
        # 0.34: the graph manager takes its decode query lengths at
        # construction (the one-token length is added there, the mixed-length
        # decode graphs at capture as before), and the suffix speculator's
        # module is imported (its class is patched there:
        # integration/speculator/upstream_suffix.py).
        on_0_34 = "decode_query_lens" in inspect.signature(ModelCudaGraphManager.__init__).parameters
        graphs = ["ModelCudaGraphManager.__init__" if on_0_34 else
                  "ModelCudaGraphManager._init_candidates", "ModelCudaGraphManager.capture"]
        assert changed == [
            "AsyncScheduler._update_after_schedule",
            "GPUModelRunner._dummy_sampler_run",
            "GPUModelRunner.execute_model",
            "GPUModelRunner.sample_tokens",
            "ModelConfig.plugin_verification",
            "ModelConfig.speculation_policy",
            *graphs,
            "Request.vllm_sampling_plugin_accept_rate",
            "Request.vllm_sampling_plugin_drafts_tried",
            "Request.vllm_sampling_plugin_found",
            "Request.vllm_sampling_plugin_found_at",
            "Request.vllm_sampling_plugin_verify_len",
            "Scheduler.__init__",
            "Scheduler._vllm_sampling_plugin_patched",
            "Scheduler.update_draft_token_ids",
            "Scheduler.update_from_output",
            "vllm.v1.worker.gpu.model_runner.RejectionSampler",
            "vllm.v1.worker.gpu.model_runner.Sampler",
            "vllm.v1.worker.gpu.spec_decode.ngram.speculator.NgramGPUSpeculator",
            *(["vllm.v1.worker.gpu.spec_decode.suffix"] if on_0_34 else []),
        ], changed
        assert mr.GPUModelRunner._dummy_sampler_run.warms_up_plugin_kernels
        assert mr.Sampler is PluginRandomDrawSampler
        assert issubclass(PluginRandomDrawSampler, upstream.Sampler)
        assert issubclass(ngram.NgramGPUSpeculator, before[ngram.__name__]["NgramGPUSpeculator"])
        # Only the final draw is overridden (the mixin adds names; of
        # upstream's it replaces only __init__, which calls it and logs).
        overridden = sorted(n for n in vars(PluginRandomDrawSampler) if n in vars(upstream.Sampler)
                            and not n.startswith("__"))
        assert overridden == ["_sample_random"], overridden
        # It takes upstream's positional call, whatever its arguments after top_p.
        upstream_args = list(inspect.signature(upstream.Sampler._sample_random).parameters)
        inspect.signature(PluginRandomDrawSampler._sample_random).bind(*upstream_args)
        # Upstream's use_fp64_gumbel stays upstream's field; the plugin adds
        # only speculation_policy, and only as a keyword.
        fields = arg_utils.EngineArgs.__dataclass_fields__
        assert fields["use_fp64_gumbel"].default is False
        assert "speculation_policy" not in fields
        assert "plugin_verification" not in fields
        # The plugin's verification is this line's default (an engine run
        # measured it at least at upstream's in every mix), for engines and
        # for other ModelConfigs; upstream's stays one keyword away.
        assert arg_utils.EngineArgs(model="m").plugin_verification == "plugin"
        assert ModelConfig.plugin_verification == "plugin"
        assert arg_utils.EngineArgs(
            model="m", plugin_verification="upstream").plugin_verification == "upstream"
        # The verify-step takeover (integration/verification/) subclasses upstream's
        # RejectionSampler and overrides only the verify step.
        from vllm_sampling_plugin.integration.verification.verify_step import (
            PluginVerifyingRejectionSampler,
        )
        from vllm_sampling_plugin.integration.verification.verify_step_draft_logits_cache import (
            PluginVerifyingDraftCacheRejectionSampler,
        )
        verifier = PluginVerifyingDraftCacheRejectionSampler if on_0_34 else PluginVerifyingRejectionSampler
        assert mr.RejectionSampler is verifier
        assert issubclass(verifier, rejection.RejectionSampler)
        for cls in verifier.__mro__[: verifier.__mro__.index(rejection.RejectionSampler)]:
            overridden = sorted(n for n in vars(cls)
                                if n in vars(rejection.RejectionSampler) and not n.startswith("__"))
            assert overridden == ["_verify", "_verify_in_chunks"], (cls, overridden)
        if on_0_34:
            import vllm.v1.worker.gpu.spec_decode.suffix.speculator as suffix
            assert hasattr(suffix.SuffixSpeculator, "num_proposed")
        args = arg_utils.EngineArgs(model="m", use_fp64_gumbel=True, speculation_policy="adaptive")
        assert (args.use_fp64_gumbel, args.speculation_policy) == (True, "adaptive")
        # The adaptive policy is this line's default too (engine runs measured
        # it), for engines and for other ModelConfigs.
        assert arg_utils.EngineArgs(model="m").speculation_policy == "adaptive"
        assert ModelConfig.speculation_policy == "adaptive"
        print("ok")
        """,
        prelude=CPU_DEVICE_SHIM,
        env=INTERPRET,
    )
    assert out.strip().splitlines()[-1] == "ok"


# The upstream sampler on the CPU (helpers.UPSTREAM_SAMPLER_BUILDER); spies
# record what upstream's sample() hands the override and which kernels run.
SAMPLER_PRELUDE = (
    CPU_DEVICE_SHIM
    + UPSTREAM_SAMPLER_BUILDER
    + """
import inspect
import vllm.v1.worker.gpu.sample.sampler as upstream
import vllm_sampling_plugin.integration.draw.plugin_draw as draw_module
from vllm_sampling_plugin.integration.draw.sample_random import PluginRandomDrawSampler

CALLS = []  # (name, details) in call order

def spy(owner, name, record=lambda *a, **k: None):
    real = getattr(owner, name)
    def wrapper(*args, **kwargs):
        CALLS.append((name, record(*args, **kwargs)))
        return real(*args, **kwargs)
    setattr(owner, name, wrapper)

UPSTREAM_SIGNATURE = inspect.signature(upstream.Sampler._sample_random)
spy(PluginRandomDrawSampler, "_sample_random",
    lambda *a, **k: dict(UPSTREAM_SIGNATURE.bind(*a, **k).arguments))
spy(draw_module, "gumbel_sample")
spy(draw_module, "top_k_top_p_sample")
spy(upstream, "apply_top_k_top_p", lambda *a, **k: k.get("has_topp_only_rows"))

def never(*args, **kwargs):
    raise AssertionError("upstream's own Gumbel draw ran")
upstream.gumbel_sample = never

def sample(sampler, logits, slots, pos):
    # Upstream's Sampler.sample, which calls _sample_random itself.
    CALLS.clear()
    n = len(slots)
    idx = torch.tensor(slots, dtype=torch.int32)
    return sampler.sample(
        logits, idx, idx, np.array(slots), torch.tensor(pos, dtype=torch.int64),
        torch.zeros(n, dtype=torch.int32), torch.zeros(n, dtype=torch.int32),
        np.array(pos) + 1,
    )

def override_args():
    (args,) = [details for name, details in CALLS if name == "_sample_random"]
    return args

def kernels():
    return [name for name, _ in CALLS if name != "_sample_random"]

def nucleus(row, p):
    probs = row.softmax(-1)
    order = probs.argsort(descending=True)
    before = probs[order].cumsum(0) - probs[order]
    return set(order[before < p].tolist())
"""
)


@pytest.mark.parametrize("fp64", [False, True])
def test_sampler_builds_from_upstream_arguments_and_keeps_their_settings(fp64):
    out = run_python(
        f"""
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
        env=INTERPRET,
    )
    assert out.strip().splitlines()[-1] == "ok"


def test_no_top_k_batch_goes_to_the_plugin_gumbel_kernel():
    out = run_python(
        """
        sampler = build_sampler()
        sampler.add_request(0, SamplingParams(temperature=0.0))
        sampler.add_request(1, SamplingParams(temperature=1.0, seed=7))
        sampler.add_request(2, SamplingParams(temperature=1.0))
        sampler.apply_staged_writes()
        logits = LOGITS[:3].clone()
        sampled, returned = sample(sampler, logits, [0, 1, 2], [4, 4, 4])

        args = override_args()
        assert args["top_k"] is None and args["top_p"] is None
        assert args["has_topp_only_rows"] is False
        assert args["use_fused_sampler"] is False
        assert kernels() == ["gumbel_sample"], kernels()
        assert returned is logits  # nothing to process: upstream's raw logits
        assert sampled.shape == (3,) and sampled[0] == LOGITS[0].argmax()
        print("ok")
        """,
        prelude=SAMPLER_PRELUDE,
        env=INTERPRET,
        timeout=600,
    )
    assert out.strip().splitlines()[-1] == "ok"


def test_seeded_top_k_top_p_batch_goes_to_the_fused_kernel_and_stays_batch_invariant():
    out = run_python(
        """
        sampler = build_sampler()
        sampler.add_request(0, SamplingParams(temperature=0.0))
        sampler.add_request(1, SamplingParams(temperature=1.0, top_k=3, seed=11))
        sampler.add_request(2, SamplingParams(temperature=1.0, top_p=0.5, seed=5))
        sampler.add_request(3, SamplingParams(temperature=1.0, seed=7))
        sampler.apply_staged_writes()
        mixed, returned = sample(sampler, LOGITS[:4].clone(), [0, 1, 2, 3], [5] * 4)

        args = override_args()
        # 0.33's third value: row 2 has top-p without top-k.
        assert args["has_topp_only_rows"] is True
        assert args["top_k"].tolist() == [VOCAB, 3, VOCAB, VOCAB]
        assert args["use_fused_sampler"] is False
        assert kernels() == ["top_k_top_p_sample"], kernels()
        assert returned.shape == (4, VOCAB)
        assert mixed[0] == LOGITS[0].argmax()
        assert int(mixed[1]) in LOGITS[1].topk(3).indices.tolist()
        assert int(mixed[2]) in nucleus(LOGITS[2], 0.5), (int(mixed[2]), nucleus(LOGITS[2], 0.5))

        # Seeded row 3 alone takes the plain Gumbel kernel and must draw the
        # same token as beside the top-k/top-p rows.
        alone, _ = sample(sampler, LOGITS[3:4].clone(), [3], [5])
        assert kernels() == ["gumbel_sample"], kernels()
        assert alone[0] == mixed[3], (alone, mixed)
        print("ok")
        """,
        prelude=SAMPLER_PRELUDE,
        env=INTERPRET,
        timeout=600,
    )
    assert out.strip().splitlines()[-1] == "ok"


@pytest.mark.parametrize("speculative", [False, True], ids=["no_speculation", "ngram"])
def test_fp32_noise_is_upstreams_exactly_when_upstream_verifies_drafts(speculative):
    """With a speculative config, upstream's RejectionSampler draws every row
    of a step whose batch has drafts (``gumbel_block_argmax`` on the target
    logits: upstream's FP32 ``gumbel_sample`` noise, same seed and position)
    and the plugin's sampler the steps without. So there the plugin's FP32
    draw must be upstream's, token for token, or a seeded request's tokens
    would depend on its batch-mates' drafts. Without speculation the plugin
    keeps its own (faster) Philox stream. The start-up line says which."""
    out = run_python(
        f"""
        from vllm.config import SpeculativeConfig
        from vllm.v1.worker.gpu.sample.gumbel import gumbel_sample as upstream_gumbel_sample
        from vllm_sampling_plugin.ops.gumbel import gumbel_sample as plugin_gumbel_sample

        vllm_config = VllmConfig()
        if {speculative}:
            vllm_config.speculative_config = SpeculativeConfig(
                method="ngram", num_speculative_tokens=3, prompt_lookup_max=3,
                prompt_lookup_min=2,
            )
        sampler = build_sampler(vllm_config=vllm_config)
        slots = list(range(MAX_REQS))
        for slot in slots:
            sampler.add_request(slot, SamplingParams(temperature=1.0, seed=1000 + 7 * slot))
        sampler.apply_staged_writes()
        pos = [3 + 11 * slot for slot in slots]
        # Flat logits: the noise decides, so the two streams give other tokens.
        logits = LOGITS * 0.3
        sampled, _ = sample(sampler, logits.clone(), slots, pos)
        assert kernels() == ["gumbel_sample"], kernels()

        states = sampler.sampling_states
        rows, positions = torch.tensor(slots), torch.tensor(pos)
        # The token upstream's verification draws for each row (a row without
        # drafts in a step with drafts), and the plugin's Philox token.
        upstream_tokens = upstream_gumbel_sample(
            logits, rows, states.temperature.gpu, states.seeds.gpu, positions, False,
            is_drafting=False, use_fp64=False,
        )
        philox_tokens = plugin_gumbel_sample(
            logits, rows.to(torch.int32), states.temperature.gpu, states.seeds.gpu, positions,
            apply_temperature=False,
        )
        assert not torch.equal(upstream_tokens, philox_tokens)
        want = upstream_tokens if {speculative} else philox_tokens
        assert torch.equal(sampled, want), (sampled, upstream_tokens, philox_tokens)
        assert sampler.fp32_stream == ("murmur3" if {speculative} else "philox")
        line = decision_line()
        if {speculative}:
            assert "FP32, upstream's murmur3 stream" in line, line
        else:
            assert "FP32, the plugin's Philox stream" in line, line
        print("ok")
        """,
        prelude=SAMPLER_PRELUDE + flashinfer_decision_prelude(None),
        # No visible device: vLLM keeps real Triton, so its own kernel runs
        # in the interpreter too (tests/ops/test_gumbel.py, STOCK_ON_CPU_ENV).
        env={**INTERPRET, "CUDA_VISIBLE_DEVICES": ""},
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
        fake_calls = []
        def fake_flashinfer(logits, top_k, top_p):
            fake_calls.append(logits.shape)
            return torch.zeros(logits.shape[0], dtype=torch.int32)
        upstream.flashinfer_sample = fake_flashinfer
        sampler = build_sampler()
        assert sampler.use_flashinfer is {keeps_flashinfer}
        assert {note!r} in decision_line(), decision_line()
        sampler.add_request(0, SamplingParams(temperature=1.0, top_k=5))
        sampler.apply_staged_writes()
        sampled, _ = sample(sampler, LOGITS[:1].clone(), [0], [0])
        assert override_args()["use_fused_sampler"] is {keeps_flashinfer}
        if {keeps_flashinfer}:
            assert fake_calls == [(1, VOCAB)] and kernels() == [], kernels()
        else:
            assert fake_calls == [] and kernels() == ["top_k_top_p_sample"], kernels()
            assert 0 <= int(sampled[0]) < VOCAB
        print("ok")
        """,
        prelude=SAMPLER_PRELUDE + flashinfer_decision_prelude(env_value),
        env=INTERPRET,
    )
    assert out.strip().splitlines()[-1] == "ok"


def test_flashinfer_batch_stays_upstream_and_explicit_seeds_do_not():
    out = run_python(
        """
        fake_calls = []
        def fake_flashinfer(logits, top_k, top_p):
            fake_calls.append(logits.shape)
            return torch.zeros(logits.shape[0], dtype=torch.int32)
        upstream.flashinfer_sample = fake_flashinfer
        sampler = build_sampler()
        sampler.use_flashinfer = True  # as upstream decides on a supported GPU
        sampler.add_request(0, SamplingParams(temperature=1.0, top_k=5))
        sampler.add_request(1, SamplingParams(temperature=1.0, top_k=5, seed=3))
        sampler.apply_staged_writes()

        sampled, _ = sample(sampler, LOGITS[:1].clone(), [0], [0])
        assert override_args()["use_fused_sampler"] is True
        assert fake_calls == [(1, VOCAB)] and sampled.dtype == torch.int64
        assert kernels() == [], kernels()

        # Upstream keeps explicitly seeded requests off FlashInfer; the
        # plugin's seeded kernel takes them.
        sampled, _ = sample(sampler, LOGITS[:2].clone(), [0, 1], [0, 0])
        assert override_args()["use_fused_sampler"] is False
        assert fake_calls == [(1, VOCAB)]
        assert kernels() == ["top_k_top_p_sample"], kernels()
        print("ok")
        """,
        prelude=SAMPLER_PRELUDE,
        env=INTERPRET,
    )
    assert out.strip().splitlines()[-1] == "ok"


def test_sampling_mask_request_gets_upstreams_mask_with_has_topp_only_rows():
    out = run_python(
        """
        sampler = build_sampler(return_sampling_mask=True)
        assert sampler.use_flashinfer is False
        sampler.add_request(0, SamplingParams(temperature=1.0, top_p=0.5, seed=1))
        sampler.apply_staged_writes()
        sampled, returned = sample(sampler, LOGITS[:1].clone(), [0], [0])

        assert override_args()["has_topp_only_rows"] is True
        # Upstream's mask, given 0.33's keyword, then the plugin's Gumbel.
        assert CALLS[1:] == [("apply_top_k_top_p", True), ("gumbel_sample", None)], CALLS
        kept = set(torch.isfinite(returned[0]).nonzero().flatten().tolist())
        assert kept == nucleus(LOGITS[0], 0.5), kept
        assert int(sampled[0]) in kept
        print("ok")
        """,
        prelude=SAMPLER_PRELUDE,
        env=INTERPRET,
        timeout=600,
    )
    assert out.strip().splitlines()[-1] == "ok"


# Upstream's GPU n-gram proposer in Triton's interpreter, with the plugin's
# proposal counts (integration/speculator/upstream_ngram.py). vLLM's triton_utils needs
# CUDA_VISIBLE_DEVICES empty to give the real Triton (not a placeholder) on
# a machine without a GPU. The history of each request is written straight
# into RequestState's tensors, as add_request and postprocess leave it.
NGRAM_PROPOSER = """
import types
import torch
import vllm.v1.worker.gpu.buffer_utils as buffer_utils
buffer_utils.is_uva_available = lambda: False
buffer_utils.is_pin_memory_available = lambda: False
from vllm.plugins import load_general_plugins
load_general_plugins()
import vllm.v1.worker.gpu.spec_decode.ngram.speculator as ngram
from vllm.v1.worker.gpu.states import RequestState

K, MIN_N, MAX_N, MAX_LEN, MAX_REQS = 3, 2, 3, 64, 8

def build(policy):
    vllm_config = types.SimpleNamespace(
        speculative_config=types.SimpleNamespace(
            method="ngram", num_speculative_tokens=K,
            prompt_lookup_min=MIN_N, prompt_lookup_max=MAX_N),
        scheduler_config=types.SimpleNamespace(max_num_seqs=MAX_REQS),
        model_config=types.SimpleNamespace(max_model_len=MAX_LEN, speculation_policy=policy),
    )
    req_states = RequestState(
        max_num_reqs=MAX_REQS, max_model_len=MAX_LEN, max_num_batched_tokens=64,
        num_speculative_steps=K, vocab_size=100, device=torch.device("cpu"),
    )
    return ngram.NgramGPUSpeculator(vllm_config, torch.device("cpu"), req_states), req_states

def expected(tokens):
    # Prompt lookup: the longest suffix n-gram (MAX_N down to MIN_N) seen
    # earlier, its rightmost occurrence; the tokens after it, at most K.
    for n in range(MAX_N, MIN_N - 1, -1):
        suffix = tokens[len(tokens) - n:]
        for pos in range(len(tokens) - n - 1, -1, -1):
            if len(tokens) >= n and tokens[pos:pos + n] == suffix:
                return tokens[pos + n:pos + n + K]
    return []

def propose(speculator, req_states, histories, slots, num_sampled):
    for slot, tokens in zip(slots, histories):
        req_states.all_token_ids.gpu[slot, :len(tokens)] = torch.tensor(tokens)
        req_states.total_len.gpu[slot] = len(tokens)
        req_states.last_sampled_tokens[slot, 0] = tokens[-1]
    n = len(slots)
    batch = types.SimpleNamespace(num_reqs=n, idx_mapping=torch.tensor(slots, dtype=torch.int64))
    drafts = speculator.propose(
        batch, None, None, None, None,
        torch.tensor(num_sampled, dtype=torch.int32), torch.zeros(n, dtype=torch.int32),
        req_states.last_sampled_tokens, None, None, None,
    )
    return drafts.clone()
"""


def test_upstream_ngram_proposer_reports_how_many_drafts_it_found():
    """The counts repeat upstream's finalize kernel's reduction of its scan
    (upstream_ngram.py): each request's count is the length of its real
    match, and the drafts past it are upstream's padding (the last token)."""
    out = run_python(
        """
        speculator, req_states = build("adaptive")
        assert speculator.reports_proposals
        histories = [
            [5, 6, 7, 8, 9, 10, 11, 12],         # nothing repeats
            [1, 2, 3, 4, 5, 6, 7, 1, 2, 3],      # "1 2 3" seen: 4 5 6 follow
            [9, 1, 2, 1, 2],                     # "1 2" seen: only 1 2 follow it
            [4, 5, 6, 4, 5, 6, 4, 5],            # longest match near the end: 6 4 5
            [3, 1, 2, 3, 1, 2],                  # matches, but sampled nothing this step
            [7],                                 # shorter than MIN_N
        ]
        slots = [6, 0, 3, 1, 5, 2]              # batch row -> RequestState row
        num_sampled = [1, 1, 1, 2, 0, 1]
        drafts = propose(speculator, req_states, histories, slots, num_sampled)
        counts = speculator.num_proposed(len(slots)).tolist()
        want = [len(expected(h)) if s > 0 else 0 for h, s in zip(histories, num_sampled)]
        assert counts == want, (counts, want)
        assert want == [0, 3, 2, 3, 0, 0], want
        for row, (history, count) in enumerate(zip(histories, counts)):
            found = drafts[row, :count].tolist()
            assert found == expected(history)[:count], (row, found)
            # Past the match, upstream pads with the last sampled token.
            assert drafts[row, count:].tolist() == [history[-1]] * (K - count), (row, drafts[row])
        assert speculator.num_proposed(2).tolist() == counts[:2]

        # A dummy run (profiling, warm-up) leaves the counts alone.
        batch = types.SimpleNamespace(num_reqs=2, idx_mapping=torch.tensor([0, 1]))
        speculator.propose(batch, None, None, None, None, None, None, None, None,
                           None, None, dummy_run=True)
        assert speculator.num_proposed(len(slots)).tolist() == counts

        # A step the policy planned without proposal launches nothing: the
        # buffer, the scan's scratch and the counts stay as they were.
        scratch = speculator.scratch.clone()
        speculator.propose_this_step = False
        skipped = propose(speculator, req_states, [[8, 8, 8, 8]] * 2, [0, 1], [1, 1])
        assert torch.equal(skipped, drafts[:2]), (skipped, drafts)
        assert torch.equal(speculator.scratch, scratch)
        assert speculator.num_proposed(len(slots)).tolist() == counts
        speculator.propose_this_step = True

        fixed, _ = build("fixed")
        assert not fixed.reports_proposals
        print("ok")
        """,
        prelude=CPU_DEVICE_SHIM + NGRAM_PROPOSER,
        env={**INTERPRET, "CUDA_VISIBLE_DEVICES": ""},
        timeout=600,
    )
    assert out.strip().splitlines()[-1] == "ok"


def test_bench_e2e_plugin_engine_kwargs_reach_the_model_config(tmp_path):
    """``bench e2e``'s plugin n-gram engines hand ``speculation_policy`` to
    ``LLM(...)``, which passes it to ``EngineArgs(...)`` before any general
    plugin has loaded: the platform-plugin hook (integration/settings/early.py) has
    taught EngineArgs the keyword by then, and the setting reaches the
    ModelConfig the workers receive, beside upstream's own use_fp64_gumbel."""
    from tests.tiny_model import write_tiny_llama

    model = str(write_tiny_llama(tmp_path / "tiny"))
    out = run_python(
        f"""
        import pickle
        from benchmarks.e2e.engine import EngineSpec
        from vllm.engine.arg_utils import EngineArgs
        for policy in ("adaptive", "fixed"):
            spec = EngineSpec(role="plugin", model={model!r}, max_num_seqs=8,
                              gpu_memory_utilization=0.2, max_model_len=256, ngram_k=3,
                              speculation_policy=policy, use_fp64_gumbel=True)
            config = EngineArgs(load_format="dummy", **spec.llm_kwargs()).create_engine_config()
            model_config = pickle.loads(pickle.dumps(config.model_config))
            print(config.speculative_config.method, model_config.speculation_policy,
                  model_config.use_fp64_gumbel)
        """,
        prelude=CPU_DEVICE_SHIM,
        env={"VLLM_USE_V2_MODEL_RUNNER": "1"},
    )
    assert out.strip().splitlines()[-2:] == ["ngram adaptive True", "ngram fixed True"], out
