"""``--plugin-verification plugin`` on vLLM 0.32/0.33 (the rejection seam's
VERIFY_STEP_OVER_UPSTREAM shape; integration/verification/verify_step.py), on the
CPU: upstream's own RejectionSampler and the plugin's subclass, built from the
same real Sampler, verify the same inputs.

Upstream's rejection kernels are Triton kernels that vLLM compiles against
its placeholder when it finds no GPU; the prelude rebinds vLLM's
``triton_utils`` to the real Triton (interpreter mode: ``TRITON_INTERPRET=1``
before vLLM is imported) and reloads the modules that hold them, so that
upstream's ``rejection_sample`` runs in Triton's interpreter as the plugin's
kernel does. Its temperature and min-p kernels stay compiled against the
placeholder, so upstream's side uses temperature 0 or 1 and no min-p; the
plugin's law at other temperatures and with min-p is checked against the
target law computed in torch, in upstream's order.

Token equality with upstream holds for greedy rows (both take the argmax).
For sampled rows it cannot: upstream's acceptance uniform is Triton's
``tl.rand(seed, pos)`` (10-round Philox, ``sample/gumbel.py``'s
``tl_rand32``), which none of the plugin's streams reproduces, and the
plugin's residual/bonus draws use its own Philox counters. The law is
checked instead: the first emitted token of each row is distributed as the
filtered target of its position, whoever verifies (chi-square, fixed seeds).
"""

import pytest

from tests.integration.helpers import CPU_DEVICE_SHIM, run_python
from tests.vllm_lines import INSTALLED_LINE, needs_seam, needs_vllm_line
from vllm_sampling_plugin.integration.settings.defaults import defaults
from vllm_sampling_plugin.integration.version import LINE_SEAMS
from vllm_sampling_plugin.integration.common import shapes

pytestmark = needs_seam(
    shapes.REJECTION, shapes.VERIFY_STEP_OVER_UPSTREAM, shapes.VERIFY_STEP_OVER_DRAFT_LOGITS_CACHE
)

INTERPRET = {"TRITON_INTERPRET": "1"}

PRELUDE = (
    CPU_DEVICE_SHIM
    + """
import importlib, importlib.util, inspect, types
import numpy as np
import torch
import vllm.v1.worker.gpu.buffer_utils as buffer_utils
buffer_utils.is_uva_available = lambda: False
buffer_utils.is_pin_memory_available = lambda: False
from vllm.plugins import load_general_plugins
load_general_plugins()
import vllm.v1.worker.gpu.model_runner as mr
import vllm.v1.worker.gpu.spec_decode.rejection_sampler as rejection
from vllm.config import VllmConfig
from vllm.sampling_params import SamplingParams
from vllm.v1.worker.gpu.states import RequestState
from vllm_sampling_plugin.integration.verification import verify_step as pv

def real_triton_for_upstreams_rejection_kernels():
    import triton, triton.language as tl, triton.language.extra.libdevice as tldevice
    import vllm.triton_utils as tu
    tu.triton, tu.tl, tu.tldevice = triton, tl, tldevice
    import vllm.v1.worker.gpu.sample.gumbel as gumbel
    import vllm.v1.worker.gpu.sample.watermark as watermark
    import vllm.v1.worker.gpu.spec_decode.rejection_sampler_utils as utils
    # 0.34's kernels find a request's cached draft logits through a helper of its own module.
    helpers = [importlib.import_module(name) for name in (
        "vllm.v1.worker.gpu.sample.batch_shard", "vllm.v1.worker.gpu.spec_decode.draft_logits",
    ) if importlib.util.find_spec(name) is not None]
    for module in (*helpers, gumbel, watermark, utils):
        importlib.reload(module)
    rejection.rejection_sample = utils.rejection_sample

CPU = torch.device("cpu")

def build_sampler(max_reqs, vocab, k, **overrides):
    req_states = RequestState(
        max_num_reqs=max_reqs, max_model_len=128, max_num_batched_tokens=4096,
        num_speculative_steps=k, vocab_size=vocab, device=CPU,
    )
    kwargs = dict(
        vllm_config=VllmConfig(), max_num_reqs=max_reqs, vocab_size=vocab, device=CPU,
        req_states=req_states, logprobs_mode="raw_logprobs", num_speculative_tokens=k,
        use_fp64_gumbel=False, enable_trace_replay=False, return_sampling_mask=False,
        custom_logits_processors=(),
    )
    kwargs.update(overrides)
    return mr.Sampler(**kwargs)

def spec_config(setting, k, method="standard", adaptive=False):
    return types.SimpleNamespace(
        num_speculative_tokens=k, enable_adaptive_verification=adaptive,
        rejection_sample_method=method, fly_entropy_threshold=0.3, fly_entropy_top_k=3,
        fly_window_size=4, synthetic_acceptance_rates=[0.5] * k,
        target_model_config=types.SimpleNamespace(plugin_verification=setting),
    )

def batch(n, k, vocab, seed=0):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(n * (k + 1), vocab, generator=g) * 2
    drafts = torch.randint(0, vocab, (n * (k + 1),), dtype=torch.int32, generator=g)
    idx = torch.arange(n, dtype=torch.int32)
    local = torch.arange(k + 1, dtype=torch.int32).repeat(n)
    return types.SimpleNamespace(
        logits=logits, drafts=drafts, idx=idx, idx_np=idx.numpy(),
        cu=torch.arange(n + 1, dtype=torch.int32) * (k + 1),
        cu_np=np.arange(n + 1) * (k + 1),
        expanded=idx.repeat_interleave(k + 1), local=local,
        pos=(20 + local).to(torch.int64), seq_lens=torch.full((n,), 24),
    )

# 0.34's contract: draft logits in a DraftLogitsCache, logprobs_dims.
CACHE_SHAPE = "logprobs_dims" in inspect.signature(rejection.RejectionSampler._verify_in_chunks).parameters

if CACHE_SHAPE:
    from vllm_sampling_plugin.integration.verification import verify_step_draft_logits_cache as pvc
    PLUGIN_VERIFIER = pvc.PluginVerifyingDraftCacheRejectionSampler
else:
    PLUGIN_VERIFIER = pv.PluginVerifyingRejectionSampler

def as_drafter_passes(draft_logits):
    # The draft logits as the installed runner hands them over.
    if draft_logits is None or not CACHE_SHAPE:
        return draft_logits
    return types.SimpleNamespace(values=draft_logits, row_mapping=None)

def verify(rs, b, draft_logits=None, max_num_logprobs=-1):
    input_batch = types.SimpleNamespace(
        cu_num_logits_np=b.cu_np, cu_num_logits=b.cu, num_reqs=len(b.idx),
        idx_mapping=b.idx, idx_mapping_np=b.idx_np, expanded_idx_mapping=b.expanded,
        expanded_local_pos=b.local, seq_lens_cpu_upper_bound=b.seq_lens,
    )
    if CACHE_SHAPE:
        logprobs_dims = None if max_num_logprobs == -1 else (max_num_logprobs, 0)
        tail = (logprobs_dims,)
    else:
        tail = (max_num_logprobs, b.drafts)
    sampled, num_sampled, _, _ = rs._verify_in_chunks(
        b.logits, input_batch, as_drafter_passes(draft_logits), b.drafts, b.pos, 1 << 20, *tail
    )
    return sampled, num_sampled

from vllm.v1.worker.gpu.sample.logits_processor.interface import LogitsProcessor

# A custom logits processor that runs on the CPU (upstream's own processors
# stage their state on a GPU): adds `amount` to the logit of `token` in every
# row of the requests whose extra_args say "raise".
class RaiseToken(LogitsProcessor):
    def __init__(self, max_reqs, token, amount):
        self.token, self.amount = token, amount
        self.on = torch.zeros(max_reqs, dtype=torch.bool)

    def add_request(self, req_idx, sampling_params):
        self.on[req_idx] = bool((sampling_params.extra_args or {}).get("raise"))
        return bool(self.on[req_idx])

    def apply(self, logits, ctx):
        rows = self.on[ctx.expanded_idx_mapping.long()]
        logits[rows, self.token] += self.amount
        return logits

def add(sampler, n, seeded=True, **params):
    # Unseeded requests draw their seeds from NumPy's global generator.
    np.random.seed(0)
    for slot in range(n):
        seed = 1000 + slot if seeded else None
        sampler.add_request(slot, SamplingParams(seed=seed, **params))
    sampler.apply_staged_writes()
"""
)


def test_default_and_engine_fallbacks_build_upstreams_rejection_sampler():
    out = run_python(
        """
        import logging
        records = []
        class Keep(logging.Handler):
            def emit(self, record):
                records.append(record.getMessage())
        plugin_logger = logging.getLogger("vllm.vllm_sampling_plugin")
        plugin_logger.addHandler(Keep())
        plugin_logger.setLevel(logging.INFO)
        k = 2
        sampler = build_sampler(8, 32, k)
        records.clear()  # the draw's own start-up line
        assert mr.RejectionSampler is PLUGIN_VERIFIER
        # plugin_verification="upstream" (named): upstream's own
        # object, nothing of the plugin.
        rs = mr.RejectionSampler(sampler, spec_config("upstream", k), CPU)
        assert type(rs) is rejection.RejectionSampler
        assert sampler.add_request.__qualname__ == "Sampler.add_request"
        assert records == [], records
        rs = mr.RejectionSampler(sampler, spec_config("plugin", k), CPU)
        assert type(rs) is PLUGIN_VERIFIER
        assert sum("the plugin verifies the batches whose law" in r for r in records) == 1, records
        for spec, kwargs, why in [
            (spec_config("plugin", k, method="synthetic"), {}, "synthetic"),
            (spec_config("plugin", k, method="block"), {}, "block"),
            (spec_config("plugin", k, method="fly"), {}, "fly"),
            (spec_config("plugin", k, adaptive=True), {}, "adaptive verification"),
        ]:
            records.clear()
            rs = mr.RejectionSampler(sampler, spec, CPU, **kwargs)
            assert type(rs) is rejection.RejectionSampler, why
            assert len(records) == 1 and why in records[0], records
        masked = build_sampler(8, 32, k, return_sampling_mask=True)
        records.clear()
        rs = mr.RejectionSampler(masked, spec_config("plugin", k), CPU)
        assert type(rs) is rejection.RejectionSampler
        assert "return_sampling_mask" in records[0]
        # The engine-level decision the draw's noise follows (seams/noise.py).
        from vllm_sampling_plugin.integration.draw import noise
        def engine(setting, method="standard"):
            return types.SimpleNamespace(
                speculative_config=spec_config(setting, k, method),
                model_config=types.SimpleNamespace(plugin_verification=setting),
                watermark_config=None)
        assert noise.fp32_noise(engine("upstream"))[0] == "murmur3"
        assert noise.fp32_noise(engine("plugin"))[0] == "philox"
        assert noise.fp32_noise(engine("plugin", "block"))[0] == "murmur3"
        # The FP32 stream of an engine without speculation, where the plugin
        # verifies: a seeded request's drafts are matched against its draws.
        assert noise.fp32_noise(types.SimpleNamespace(speculative_config=None))[0] == "philox"
        print("ok")
        """,
        prelude=PRELUDE,
        env=INTERPRET,
    )
    assert out.strip().splitlines()[-1] == "ok"


def test_each_batch_fallback_takes_upstreams_path_and_the_rest_the_plugins():
    """Routes only: upstream's apply_sampling_params/rejection_sample and the
    plugin's kernel are replaced by recorders."""
    out = run_python(
        """
        calls = []
        # What upstream's apply_sampling_params(..., skip_top_k_top_p=True)
        # hands the plugin on a batch with logits processors.
        canvas = torch.empty(0)
        def fake_output(num_reqs):
            return (torch.zeros(num_reqs, 3, dtype=torch.int64),
                    torch.ones(num_reqs, dtype=torch.int32))
        def fake_upstream(*args, **kwargs):
            calls.append("upstream")
            return fake_output(args[3].shape[0] - 1)
        def fake_plugin(*args, **kwargs):
            # The drafters cache their logits before the temperature.
            assert kwargs["scale_draft_logits"] is True
            filters = tuple(kwargs.get(name) is not None for name in ("top_k", "top_p", "min_p"))
            if kwargs["apply_temperature"]:
                assert args[0] is not canvas
                calls.append(("plugin", filters))
            else:
                # The canvas has temperature and min_p applied: the
                # kernel's min_p is off.
                assert args[0] is canvas and not kwargs["min_p"].any()
                calls.append(("plugin-canvas", filters))
            return fake_output(args[2].shape[0] - 1)
        def fake_matching(target_tokens, drafts, cu, k):
            calls.append(("matching", target_tokens.shape[0]))
            return fake_output(cu.shape[0] - 1)
        rejection.rejection_sample = fake_upstream
        pv.rejection_sample_packed = fake_plugin
        pv.accept_matching_drafts = fake_matching
        import logging
        lines = []
        handler = logging.Handler()
        handler.emit = lambda record: lines.append(record.getMessage())
        plugin_logger = logging.getLogger("vllm.vllm_sampling_plugin")
        plugin_logger.addHandler(handler)
        plugin_logger.setLevel(logging.INFO)
        k, n, vocab = 2, 4, 32
        b = batch(n, k, vocab)

        def route(params, draft_logits=None, max_num_logprobs=-1, logprobs_mode="raw_logprobs",
                  seed=None, fill=dict(temperature=1.0)):
            sampler = build_sampler(n, vocab, k, logprobs_mode=logprobs_mode)
            def apply_sampling_params(logits, *args, skip_top_k_top_p=False):
                return canvas if skip_top_k_top_p else logits
            sampler.apply_sampling_params = apply_sampling_params
            # The Sampler's draw of every logit (the matching route).
            sampler.sample = lambda logits, *a: (logits.argmax(-1), logits)
            rs = mr.RejectionSampler(sampler, spec_config("plugin", k), CPU)
            rs._get_logprobs_tensors = lambda *args: None  # a GPU kernel
            add(sampler, n - 1, seeded=False, **fill)
            sampler.add_request(n - 1, SamplingParams(seed=seed, **params))
            # The processors' staged writes copy to a GPU; the route needs
            # only the sampling parameters.
            sampler.sampling_states.apply_staged_writes()
            calls.clear()
            verify(rs, b, draft_logits, max_num_logprobs)
            assert len(calls) == 1, calls
            return calls[0]

        plugin = ("plugin", (False, False, False))
        assert route(dict(temperature=1.0)) == plugin
        assert route(dict(temperature=0.7, top_k=5, top_p=0.9, min_p=0.1)) == (
            "plugin", (True, True, True))
        assert route(dict(temperature=0.0)) == plugin
        # Logits processors without top-k/top-p: upstream's path (its canvas
        # is all its work before its kernel).
        assert route(dict(temperature=1.0, logit_bias={3: 5.0})) == "upstream"
        assert route(dict(temperature=1.0, presence_penalty=0.5)) == "upstream"
        assert route(dict(temperature=0.7, min_p=0.1, repetition_penalty=1.2)) == "upstream"
        # With top-k or top-p: upstream's canvas, the filters in the kernel.
        canvas_route = ("plugin-canvas", (True, True, True))
        assert route(dict(temperature=1.0, top_p=0.9, logit_bias={3: 5.0})) == canvas_route
        assert route(dict(temperature=0.7, top_k=5, presence_penalty=0.5)) == canvas_route
        # A later request in the same slot without them is the plugin's again.
        assert route(dict(temperature=1.0)) == plugin
        # Logprobs: raw ones are computed from the raw logits (the plugin's);
        # processed ones need upstream's canvas.
        assert route(dict(temperature=1.0, logprobs=2), max_num_logprobs=2) == plugin
        assert route(dict(temperature=1.0, logprobs=2), max_num_logprobs=2,
                     logprobs_mode="processed_logprobs") == "upstream"
        # Draft logits at any temperature (the kernel divides them by it),
        # but not over a narrower draft vocabulary.
        draft_logits = torch.randn(n, k, vocab)
        assert route(dict(temperature=0.0), draft_logits) == plugin
        # Every request greedy: the Sampler's argmax of every logit, matched,
        # whatever the drafts (a greedy target accepts its argmax only), with
        # or without logits processors.
        greedy, matched = dict(fill=dict(temperature=0.0)), ("matching", n * (k + 1))
        assert route(dict(temperature=0.0), **greedy) == matched
        assert route(dict(temperature=0.0), draft_logits, **greedy) == matched
        assert route(dict(temperature=0.0, logit_bias={3: 5.0}), **greedy) == matched
        assert route(dict(temperature=0.0, top_k=5), **greedy) == matched
        # Every filter is passed where any is on (the kernels turn each
        # off per row: one compile variant).
        assert route(dict(temperature=0.5, top_k=5, top_p=0.9), draft_logits) == (
            "plugin", (True, True, True))
        assert route(dict(temperature=0.7, min_p=0.1)) == ("plugin", (True, True, True))
        assert route(dict(temperature=1.0), torch.randn(n, k, vocab - 4)) == "upstream"
        # A seeded request: n-gram drafts are matched against the Sampler's
        # draws of every logit; draft logits keep the fused kernel.
        assert route(dict(temperature=1.0), seed=7) == ("matching", n * (k + 1))
        assert route(dict(temperature=0.7, top_p=0.9), seed=7) == ("matching", n * (k + 1))
        assert route(dict(temperature=0.0), draft_logits, seed=7) == plugin
        # With logits processors: seeded n-gram drafts are matched (the
        # Sampler applies the processors), draft logits take the canvas
        # where the batch truncates; processed logprobs and a narrower draft
        # vocabulary stay upstream's.
        assert route(dict(temperature=1.0, logit_bias={3: 5.0}), seed=7) == ("matching", n * (k + 1))
        assert route(dict(temperature=0.5, top_k=5, logit_bias={3: 5.0}), draft_logits) == canvas_route
        assert route(dict(temperature=1.0, logit_bias={3: 5.0}), draft_logits) == "upstream"
        assert route(dict(temperature=1.0, top_p=0.9, logit_bias={3: 5.0}, logprobs=2),
                     max_num_logprobs=2, logprobs_mode="processed_logprobs") == "upstream"
        assert route(dict(temperature=1.0, top_p=0.9, logit_bias={3: 5.0}),
                     torch.randn(n, k, vocab - 4)) == "upstream"
        # Each reason for upstream's path is said once a process; the
        # plugin's own batches say nothing.
        fallbacks = [line for line in lines if "are verified by upstream's code" in line]
        assert len(fallbacks) == len(set(fallbacks)) == 3, fallbacks
        assert not any("None" in line for line in fallbacks), fallbacks
        print("ok")
        """,
        prelude=PRELUDE,
        env=INTERPRET,
    )
    assert out.strip().splitlines()[-1] == "ok"


def test_drafters_cache_their_logits_before_the_temperature():
    """The premise of ``scale_draft_logits=True``: upstream's draft sampler
    (``gumbel_sample`` with a ``logits_cache``, as the draft-model and
    EAGLE-style speculators call it) stores the logits it was given, not
    those divided by the request's temperature, which it samples from."""
    out = run_python(
        """
        real_triton_for_upstreams_rejection_kernels()
        from vllm.v1.worker.gpu.sample import gumbel
        num_reqs, k, vocab = 3, 2, 40
        g = torch.Generator().manual_seed(4)
        logits = torch.randn(num_reqs, vocab, generator=g) * 3
        cache = torch.full((num_reqs, k, vocab), float("nan"))
        temperature = torch.tensor([0.5, 0.7, 2.0])
        gumbel.gumbel_sample(
            logits, torch.arange(num_reqs, dtype=torch.int32), temperature,
            torch.arange(num_reqs, dtype=torch.int64), torch.zeros(num_reqs, dtype=torch.int64),
            apply_temperature=True, is_drafting=True, logits_cache=cache,
            logits_cache_col=torch.tensor(1, dtype=torch.int64),
        )
        assert torch.equal(cache[:, 1], logits)
        assert not torch.equal(cache[:, 1], logits / temperature[:, None])
        print("ok")
        """,
        prelude=PRELUDE,
        env=INTERPRET,
    )
    assert out.strip().splitlines()[-1] == "ok"


@pytest.mark.parametrize("processor", [False, True], ids=["plain", "logits-processor"])
def test_greedy_rows_get_upstreams_tokens_exactly(processor):
    """Greedy rows, and, with a custom logits processor, greedy rows of a
    batch whose last request samples with top-k (the plugin's canvas route)."""
    out = run_python(
        f"""
        real_triton_for_upstreams_rejection_kernels()
        k, n, vocab = 3, 24, 48
        b = batch(n, k, vocab, seed=3)
        raise_token, amount = 7, 6.0
        target = b.logits.clone()
        if {processor}:
            target[:, raise_token] += amount
        # Drafts equal to the target argmax for a random prefix, then wrong,
        # and an invalid (-1) draft in some rows, as a grammar marks them.
        argmax = target.argmax(-1).to(torch.int32)
        g = torch.Generator().manual_seed(5)
        for r in range(n):
            keep = int(torch.randint(0, k + 1, (1,), generator=g))
            for j in range(keep):
                b.drafts[r * (k + 1) + j + 1] = argmax[r * (k + 1) + j]
            if r % 5 == 0:
                b.drafts[r * (k + 1) + 1 + min(keep, k - 1)] = -1
        results = {{}}
        for owner in ("upstream", "plugin"):
            processors = (RaiseToken(n, raise_token, amount),) if {processor} else ()
            sampler = build_sampler(n, vocab, k, custom_logits_processors=processors)
            rs = mr.RejectionSampler(sampler, spec_config(owner, k), CPU)
            add(sampler, n, temperature=0.0, top_k=5, min_p=0.2, extra_args={{"raise": True}})
            if {processor}:
                # One sampled request with top-k puts the batch on the canvas route.
                sampler.add_request(n - 1, SamplingParams(temperature=1.0, top_k=5,
                                                          extra_args={{"raise": True}}))
                sampler.sampling_states.apply_staged_writes()
            sampled, num = verify(rs, b)
            greedy = n - 1 if {processor} else n
            results[owner] = [sampled[r, : num[r]].tolist() for r in range(greedy)]
            if owner == "plugin":
                assert rs.batches == {{"plugin": 1, "upstream": 0}}, rs.batches
        assert results["plugin"] == results["upstream"], results
        lengths = sorted({{len(t) for t in results["plugin"]}})
        assert len(lengths) > 2, lengths  # accepted prefixes of several lengths
        if {processor}:
            # The processor decides most greedy tokens: it was applied.
            emitted = [token for row in results["plugin"] for token in row]
            assert emitted.count(raise_token) > len(emitted) // 2, emitted
        print("ok")
        """,
        prelude=PRELUDE,
        env=INTERPRET,
        timeout=600,
    )
    assert out.strip().splitlines()[-1] == "ok"


LAW_CODE = """
from scipy.stats import chisquare
k, n, vocab = 1, {n}, 32
b = batch(n, k, vocab, seed=11)
# Every row has the same target logits and draft; seeds differ per row.
b.logits[0::2] = b.logits[0]
b.logits[1::2] = b.logits[1]
# With a logits processor: the ninth most likely token raised into the top
# few, so that a verifier that skipped the processor draws another law.
raised = int(b.logits[0].argsort(descending=True)[8])
bias = torch.zeros(vocab)
if {processor}:
    bias[raised] = 3.0
z = (b.logits[0] + bias) / {temperature}
keep = torch.ones(vocab, dtype=torch.bool)
if {min_p} > 0:
    keep &= z >= z.max() + np.log({min_p})
if {top_k} > 0:
    keep &= z >= z[keep].sort(descending=True).values[min({top_k}, int(keep.sum())) - 1]
probs = torch.where(keep, z, -float("inf")).softmax(-1)
if {top_p} < 1:
    order = probs.argsort(descending=True)
    before = probs[order].cumsum(0) - probs[order]
    mask = torch.zeros(vocab, dtype=torch.bool)
    mask[order[before < {top_p}]] = True
    probs = torch.where(mask, probs, 0.0)
    probs /= probs.sum()
# A likely draft, so that both acceptance and rejection happen.
b.drafts[1::2] = int(probs.argsort(descending=True)[1])
if {processor}:
    assert probs[raised] > 0.05, probs[raised]
if {real_upstream}:
    real_triton_for_upstreams_rejection_kernels()
processors = (RaiseToken(n, raised, 3.0),) if {processor} else ()
sampler = build_sampler(n, vocab, k, use_fp64_gumbel={fp64}, custom_logits_processors=processors)
rs = mr.RejectionSampler(sampler, spec_config("{owner}", k), CPU)
add(sampler, n, seeded={seeded}, temperature={temperature}, top_k={top_k}, top_p={top_p},
    min_p={min_p}, extra_args={{"raise": {processor}}})
sampled, num = verify(rs, b)
if "{owner}" == "plugin":
    assert rs.batches == {{"plugin": 1, "upstream": 0}}, rs.batches
first = sampled[:, 0]
support = probs > 0
assert bool(support[first].all()), "a filtered-out token was emitted"
counts = torch.bincount(first, minlength=vocab)[support].double()
expected = probs[support].double()
expected = expected / expected.sum() * n
stat, p_value = chisquare(counts.numpy(), expected.numpy())
accepted = int((num == 2).sum())
print(f"p={{p_value:.4f}} accepted={{accepted}}")
assert p_value > 1e-3, (p_value, counts.tolist(), expected.tolist())
assert 0 < accepted < n
print("ok")
"""


# The FP64 and temperature/min-p cases differ from plugin-fp32 only inside
# the plugin's kernel (its op tests draw those laws) and take minutes each in
# the interpreter: CI draws them on the newest line only.
NEWEST_LINE_ONLY = needs_vllm_line("0.33", why="the same kernel as plugin-fp32 on 0.32")


@pytest.mark.parametrize(
    "owner, seeded, fp64, temperature, top_k, top_p, min_p, processor",
    [
        # Upstream itself against the law (its temperature/min-p kernels
        # need a GPU: temperature 1, top-k/top-p only).
        pytest.param("upstream", True, False, 1.0, 6, 0.9, 0.0, False, id="upstream"),
        pytest.param("upstream", False, False, 1.0, 6, 0.9, 0.0, True, id="upstream-logits-processor",
                     marks=NEWEST_LINE_ONLY),
        # Unseeded requests: the fused kernel; seeded ones: matching the
        # Sampler's draws (whose temperature/min-p passes are upstream's).
        pytest.param("plugin", False, False, 1.0, 6, 0.9, 0.0, False, id="plugin-fp32"),
        pytest.param("plugin", True, False, 1.0, 6, 0.9, 0.0, False, id="plugin-matching"),
        # A custom logits processor: upstream's canvas, top-k/top-p in the
        # kernel (temperature 1: upstream's temperature kernel needs a GPU).
        pytest.param("plugin", False, False, 1.0, 6, 0.9, 0.0, True, id="plugin-logits-processor"),
        pytest.param("plugin", True, False, 1.0, 6, 0.9, 0.0, True,
                     id="plugin-matching-logits-processor", marks=NEWEST_LINE_ONLY),
        pytest.param("plugin", False, True, 1.0, 6, 0.9, 0.0, False, id="plugin-fp64",
                     marks=NEWEST_LINE_ONLY),
        pytest.param("plugin", False, False, 0.7, 8, 1.0, 0.05, False, id="plugin-temperature-min-p",
                     marks=NEWEST_LINE_ONLY),
    ],
)
def test_first_emitted_token_follows_the_filtered_target_law(owner, seeded, fp64, temperature, top_k,
                                                             top_p, min_p, processor):
    out = run_python(
        LAW_CODE.format(
            n=400, owner=owner, seeded=seeded, fp64=fp64, temperature=temperature, top_k=top_k,
            top_p=top_p, min_p=min_p, processor=processor, real_upstream=owner == "upstream",
        ),
        prelude=PRELUDE,
        env=INTERPRET,
        timeout=900,
    )
    assert out.strip().splitlines()[-1] == "ok", out


def test_setting_is_validated_and_reaches_the_model_config(tmp_path):
    """Named, the setting is what the engine gets; unnamed, the default of
    the line's verify-step shape (integration/settings/defaults.py)."""
    default = defaults(LINE_SEAMS[INSTALLED_LINE])["plugin_verification"]
    out = run_python(
        f"""
        from vllm.engine.arg_utils import AsyncEngineArgs, EngineArgs
        from vllm.utils.argparse_utils import FlexibleArgumentParser
        try:
            EngineArgs(model="m", plugin_verification="yes")
        except ValueError as e:
            assert "plugin_verification='yes'" in str(e), e
            print("rejected")
        parser = AsyncEngineArgs.add_cli_args(FlexibleArgumentParser())
        for owner in ("plugin", "upstream"):
            args = parser.parse_args(["--model", "m", "--plugin-verification", owner])
            assert AsyncEngineArgs.from_cli_args(args).plugin_verification == owner
        args = parser.parse_args(["--model", "m"])
        assert AsyncEngineArgs.from_cli_args(args).plugin_verification == {default!r}
        assert EngineArgs(model="m").plugin_verification == {default!r}
        try:
            parser.parse_args(["--model", "m", "--plugin-verification", "both"])
        except SystemExit:
            print("flag rejected")
        print("ok")
        """,
        prelude=CPU_DEVICE_SHIM,
    )
    lines = out.strip().splitlines()
    assert "rejected" in lines and "flag rejected" in lines and lines[-1] == "ok"


IDENTITY_CODE = """
k, n, vocab = 3, 16, 32
b = batch(n, k, vocab, seed=21)
b.logits *= 2  # peaked, as a model's: drafts are accepted often
# Each draft is the most likely token of the logit before it: sampled at
# temperature 1 with top-p 0.95, some are accepted and some rejected.
likely = b.logits.argmax(-1).to(torch.int32)
for r in range(n):
    for j in range(k):
        b.drafts[r * (k + 1) + j + 1] = likely[r * (k + 1) + j]
sampler = build_sampler(n, vocab, k, use_fp64_gumbel={fp64})
rs = mr.RejectionSampler(sampler, spec_config("plugin", k), CPU)
add(sampler, n, temperature=1.0, top_p=0.95)
# The start-up warm-up compiles the verification kernels and sizes the
# draw's warm-up: matching draws every logit (of n-gram drafts when seeded,
# of any drafts when greedy).
assert rs.warm_up_verification(n, CPU, (torch.float32,), (torch.int32,), None) == n * (k + 1)
assert rs.warm_up_verification(n, CPU, (torch.float32,), (torch.int32,), as_drafter_passes(torch.zeros(n, k, vocab))) == n * (k + 1)
sampled, num = verify(rs, b)
emitted = [sampled[r, : num[r]].tolist() for r in range(n)]
# Without speculation every position is a step of its own: one row per
# request, drawn by the same Sampler.
def drawn_alone(j):
    rows = torch.arange(n) * (k + 1) + j
    tokens, _ = sampler.sample(
        b.logits[rows], b.idx, b.idx, b.idx_np, b.pos[rows], b.drafts[rows],
        torch.zeros(n, dtype=torch.int32), b.seq_lens.numpy())
    return tokens
alone = torch.stack([drawn_alone(j) for j in range(k + 1)], 1)
assert all(e == alone[r, : len(e)].tolist() for r, e in enumerate(emitted)), (emitted, alone)
lengths = sorted({{len(e) for e in emitted}})
assert lengths[0] <= k and lengths[-1] == k + 1, lengths  # rejections and full acceptances
# The fused kernel (the route of unseeded requests) follows the same law
# with other noise: with the same seeds its tokens are not these.
sampler.sampling_states.seeds_set[:] = False
again, num_again = verify(rs, b)
assert [again[r, : num_again[r]].tolist() for r in range(n)] != emitted
print("ok")
"""


@pytest.mark.parametrize("fp64", [False, pytest.param(True, marks=NEWEST_LINE_ONLY)],
                         ids=["fp32", "fp64"])
def test_seeded_requests_get_the_tokens_they_draw_without_speculation(fp64):
    """Issue 25: where the plugin owns the draw and the verification, a seeded
    request's tokens are the ones it draws without speculation: its n-gram
    drafts are matched against the Sampler's own draws of every logit."""
    out = run_python(
        IDENTITY_CODE.format(fp64=fp64), prelude=PRELUDE, env=INTERPRET, timeout=900
    )
    assert out.strip().splitlines()[-1] == "ok", out


def test_warm_up_compiles_every_variant_the_verification_steps_launch():
    """Every kernel of ops/ is replaced by a recorder of its Triton compile key
    (tests/compile_keys.py), on an H100's launch plans and vocabulary 151936:
    the verifier's start-up warm-up must have launched every key that its
    steps launch, at every batch size up to max_num_reqs, on the runner's raw
    logits (the model's dtype whatever the batch samples with: the plugin
    skips upstream's float32 copy; float32 where a model emits it), greedy,
    sampled, each filter alone and all together, with n-gram drafts and
    with draft logits, and on the float32 canvas of a batch with logits
    processors; greedy batches, matched against the Sampler's draws of
    every logit, by the draw's warm-up up to the rows the verifier names. (On a GPU, vLLM 0.33's JIT monitor logged the filtered
    kernels compiling mid-run when the warm-up filtered float32 only.)"""
    out = run_python(
        """
        import sys
        sys.path.insert(0, "scripts")
        from kernel_stubs import stub_ops
        from tests.compile_keys import Recorder
        from vllm_sampling_plugin.integration.warmup import warm_up_plugin_draw
        keys = set()
        stub_ops(lambda name, kernel: Recorder(name, kernel, keys))
        k, max_reqs, vocab = 3, 48, 151936
        mixes = [
            (dtype, params)
            for dtype in (torch.bfloat16, torch.float32)
            for params in (
                dict(temperature=0.0),
                dict(temperature=1.0),
                dict(temperature=0.7),
                dict(temperature=0.7, top_k=20),
                dict(temperature=0.7, top_p=0.9),
                dict(temperature=0.7, min_p=0.05),
                dict(temperature=0.7, top_k=20, top_p=0.9, min_p=0.05),
                # A logits processor: upstream's float32 canvas, top-k/top-p
                # in the kernel.
                dict(temperature=0.7, top_k=20, extra_args={"raise": True}),
                dict(temperature=0.7, top_p=0.9, min_p=0.05, extra_args={"raise": True}),
            )
        ]
        for draft_logits in (None, torch.zeros(max_reqs, k, vocab)):
            sampler = build_sampler(max_reqs, vocab, k,
                                    custom_logits_processors=(RaiseToken(max_reqs, 0, 1.0),))
            # Upstream's canvas: a float32 copy of the logits with the
            # processors, temperature and min_p applied (those kernels of
            # upstream's need a GPU; the compile keys only its dtype).
            sampler.apply_sampling_params = (
                lambda logits, *args, skip_top_k_top_p: logits.float())
            rs = mr.RejectionSampler(sampler, spec_config("plugin", k), CPU)
            keys.clear()
            dtypes = (torch.float32, torch.bfloat16)
            max_rows = rs.warm_up_verification(
                max_reqs, CPU, dtypes, (torch.int64,), as_drafter_passes(draft_logits)
            )
            names = {key[0] for key in keys}
            assert {"_rejection_kernel", "_rejection_step_kernel", "_emit_kernel",
                    "_list_chunks_kernel", "_threshold_kernel", "_accept_matching_kernel"} <= names, names
            # Greedy batches are matched against the Sampler's draws of every
            # logit: the draw's warm-up (the seam's, after this one) covers them.
            warm_up_plugin_draw(sampler, max_reqs, CPU, dtypes, (torch.int64,), max_rows)
            warmed = set(keys)
            logits = torch.empty(max_reqs * (k + 1), vocab)
            for dtype, params in mixes:
                add(sampler, max_reqs, seeded=False, **params)
                for n in range(1, max_reqs + 1, 1 if dtype == torch.bfloat16 else 3):
                    slots = torch.arange(n, dtype=torch.int64)  # the runner's steps' dtype
                    local = torch.arange(k + 1, dtype=torch.int32).repeat(n)
                    cu = torch.arange(n + 1, dtype=torch.int32) * (k + 1)
                    b = types.SimpleNamespace(
                        logits=logits[: n * (k + 1)].to(dtype),
                        drafts=torch.zeros(n * (k + 1), dtype=torch.int32),
                        idx=slots, idx_np=slots.numpy(), cu=cu, cu_np=cu.numpy(),
                        expanded=slots.repeat_interleave(k + 1), local=local,
                        pos=local.to(torch.int64), seq_lens=torch.full((n,), 24))
                    keys.clear()
                    verify(rs, b, draft_logits)
                    assert rs.plugin_batch, (params, n)
                    assert rs.processed(b.idx_np) == ("extra_args" in params), params
                    missing = keys - warmed
                    assert not missing, (params, n, draft_logits is None, min(missing))
        print("ok")
        """,
        prelude=PRELUDE,
        env=INTERPRET,
        timeout=900,
    )
    assert out.strip().splitlines()[-1] == "ok"


@needs_seam(shapes.REJECTION, shapes.VERIFY_STEP_OVER_DRAFT_LOGITS_CACHE)
def test_trace_replay_emits_the_trace_on_every_route_and_as_upstream_does():
    """vLLM 0.34's trace replay (``SamplingParams.trace_decode_token_ids``):
    whoever verifies and whichever route the batch takes (matching for greedy
    and seeded batches, the fused kernel otherwise), a request emits the
    trace's tokens from its step on, keeping each draft only while it equals
    the trace. Request r's first r drafts follow its trace, the rest do not."""
    out = run_python(
        """
        real_triton_for_upstreams_rejection_kernels()
        # The trace's staged writes and replay are upstream kernels too.
        importlib.reload(buffer_utils)
        buffer_utils.is_uva_available = lambda: False
        buffer_utils.is_pin_memory_available = lambda: False
        import vllm.v1.worker.gpu.sample.trace_replay as trace_replay
        importlib.reload(trace_replay)
        n, k, vocab, prompt_len, step = 4, 3, 32, 10, 2
        trace = [[(7 * r + 3 * i + 1) % vocab for i in range(12)] for r in range(n)]

        def emitted(params, setting):
            sampler = build_sampler(8, vocab, k, enable_trace_replay=True)
            states = sampler.req_states
            for slot in range(n):
                sampler.add_request(
                    slot, SamplingParams(trace_decode_token_ids=trace[slot], **params))
                states.prompt_len.np[slot] = prompt_len
                states.total_len.stage_write_elem(slot, prompt_len + step)
            sampler.apply_staged_writes()
            states.prompt_len.copy_to_uva()
            states.total_len.apply_write()
            rs = mr.RejectionSampler(sampler, spec_config(setting, k), CPU)
            b = batch(n, k, vocab)
            drafts = b.drafts.view(n, k + 1)
            for r in range(n):
                for i in range(k):
                    token = trace[r][step + i]
                    drafts[r, i + 1] = token if i < r else (token + 1) % vocab
            sampled, num_sampled = verify(rs, b)
            if setting == "plugin":
                assert rs.batches == {"plugin": 1, "upstream": 0}, (params, rs.batches)
            return [sampled[r, : num_sampled[r]].tolist() for r in range(n)]

        expected = [trace[r][step : step + min(r, k) + 1] for r in range(n)]
        for params in (dict(temperature=0.0), dict(temperature=1.0), dict(temperature=1.0, seed=5)):
            for setting in ("plugin", "upstream"):
                assert emitted(params, setting) == expected, (params, setting)
        # Upstream's top-k/top-p and temperature kernels need a GPU; the plugin's folded ones do not.
        assert emitted(dict(temperature=0.8, top_k=5, top_p=0.9), "plugin") == expected
        print("ok")
        """,
        prelude=PRELUDE,
        env=INTERPRET,
        timeout=900,
    )
    assert out.strip().splitlines()[-1] == "ok"
