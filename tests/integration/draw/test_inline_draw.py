"""The draw seam's ``sample(skip_top_k_top_p)`` shape (vLLM 0.23-0.29): the
plugin keeps upstream's steps and FlashInfer rule and draws every other batch.

vLLM's own Triton kernels (temperature, penalties) do not run without a GPU,
so ``apply_sampling_params`` is replaced by the identity (the logits stand for
processed ones); the plugin's kernels run in Triton's interpreter.
"""

from tests.integration.helpers import CPU_DEVICE_SHIM, run_python
from tests.vllm_lines import needs_seam
from vllm_sampling_plugin.integration.common import shapes

pytestmark = needs_seam(shapes.DRAW, shapes.SAMPLE_SKIPPING_TOP_K_TOP_P)

PRELUDE = CPU_DEVICE_SHIM + """
import inspect
import numpy as np
import torch
import vllm.v1.worker.gpu.buffer_utils as buffer_utils
buffer_utils.is_uva_available = lambda: False
buffer_utils.is_pin_memory_available = lambda: False

def _cpu_uva_buffer(self, size, dtype):
    # Some releases' RequestState keeps a table in UVA memory unconditionally;
    # on the CPU a plain tensor stands for it.
    self.cpu = torch.zeros(size, dtype=dtype)
    self.np = self.cpu.numpy()
    self.uva = self.cpu

buffer_utils.UvaBuffer.__init__ = _cpu_uva_buffer
from vllm.plugins import load_general_plugins
load_general_plugins()
import vllm.v1.worker.gpu.model_runner as mr
import vllm.v1.worker.gpu.sample.sampler as upstream
from vllm.sampling_params import SamplingParams
from vllm.v1.worker.gpu.states import RequestState

VOCAB, MAX_REQS = 64, 8
CPU = torch.device("cpu")
LOGITS = torch.randn(MAX_REQS, VOCAB, generator=torch.Generator().manual_seed(0))

def build_sampler():
    req_states = RequestState(
        max_num_reqs=MAX_REQS, max_model_len=128, max_num_batched_tokens=128,
        num_speculative_steps=0, vocab_size=VOCAB, device=CPU,
    )
    offered = dict(
        max_num_reqs=MAX_REQS, vocab_size=VOCAB, device=CPU, req_states=req_states,
        logprobs_mode="raw_logprobs", num_speculative_tokens=1, use_fp64_gumbel=False,
        enable_trace_replay=False, reasoning_config=None, return_sampling_mask=False,
    )
    # The keyword arguments this release's runner passes (load_model).
    accepted = inspect.signature(upstream.Sampler.__init__).parameters
    sampler = mr.Sampler(**{k: v for k, v in offered.items() if k in accepted})
    sampler.apply_sampling_params = lambda logits, *args, **kwargs: logits
    return sampler

# The draw reads only the sampling states (add_request's other arguments
# changed between releases).
def sample(sampler, logits, slots, pos):
    idx = torch.tensor(slots, dtype=torch.int64)
    inputs = [np.array(slots), torch.tensor(pos, dtype=torch.int64), None, None]
    if "idx_mapping" in inspect.signature(upstream.Sampler.sample).parameters:
        inputs.insert(0, idx)
    return sampler.sample(logits, idx, *inputs, return_logprobs=False)
"""


def test_sampler_is_the_inline_draw_shape_and_draws_seeded_batch_invariant():
    out = run_python(
        """
        from vllm_sampling_plugin.integration.draw import PluginInlineDrawSampler
        sampler = build_sampler()
        assert type(sampler) is PluginInlineDrawSampler
        sampler.sampling_states.add_request(0, SamplingParams(temperature=0.0))
        sampler.sampling_states.add_request(1, SamplingParams(temperature=1.0, top_k=3, seed=11))
        sampler.sampling_states.add_request(2, SamplingParams(temperature=1.0, seed=7))
        sampler.sampling_states.apply_staged_writes()
        mixed, returned = sample(sampler, LOGITS[:3].clone(), [0, 1, 2], [5] * 3)
        assert returned.shape == (3, VOCAB)
        assert mixed[0] == LOGITS[0].argmax()
        assert int(mixed[1]) in LOGITS[1].topk(3).indices.tolist()
        # Row 2 alone takes the plain Gumbel kernel: same (seed, position) noise.
        alone, _ = sample(sampler, LOGITS[2:3].clone(), [2], [5])
        assert alone[0] == mixed[2], (alone, mixed)
        print("ok")
        """,
        prelude=PRELUDE,
    )
    assert out.strip().splitlines()[-1] == "ok"


def test_flashinfer_takes_only_batches_upstreams_rule_allows():
    out = run_python(
        """
        calls = []
        upstream.flashinfer_sample = lambda logits, k, p: calls.append(len(logits)) or torch.zeros(
            len(logits), dtype=torch.int32)
        sampler = build_sampler()
        sampler.use_flashinfer = True  # as with VLLM_USE_FLASHINFER_SAMPLER=1 on a GPU
        sampler.sampling_states.add_request(0, SamplingParams(temperature=1.0, top_p=0.9))
        sampler.sampling_states.add_request(1, SamplingParams(temperature=1.0, top_p=0.9, seed=3))
        sampler.sampling_states.apply_staged_writes()
        tokens, _ = sample(sampler, LOGITS[:1].clone(), [0], [0])
        assert calls == [1] and tokens.dtype == torch.int64
        # An explicit seed keeps the batch on the plugin's fused kernel.
        tokens, _ = sample(sampler, LOGITS[:2].clone(), [0, 1], [0, 0])
        assert calls == [1]
        print("ok")
        """,
        prelude=PRELUDE,
    )
    assert out.strip().splitlines()[-1] == "ok"
