"""The 0.20 line's logit-bias state on real vLLM objects, on the CPU.

``RaceFreeLogitBiasState`` keeps vLLM 0.20's tables and staged writes and
swaps the kernel. One fresh interpreter (vLLM's Triton kernels run under the
interpreter only with ``CUDA_VISIBLE_DEVICES`` empty, see test_line_0_32.py)
builds both states from the same ``SamplingParams`` and records:

* both kernels on the same logits. The interpreter runs vLLM 0.20's kernel
  one program at a time, so its race cannot happen here; the two must agree
  bit for bit everywhere but the min-tokens boundary, where the plugin masks
  the stop tokens for exactly ``min_tokens`` outputs (0.20: one more);
* what the plugin's state stages (sorted lists);
* a real ``PluginSampler`` and ``PluginRejectionSampler`` drawing with
  allowed ids, through the plugin's kernel on both paths.

vLLM's UVA buffers need pinned memory (a GPU); here they are host tensors,
which is all the kernels read.
"""

import json

import pytest

from tests.integration.helpers import run_python
from tests.vllm_lines import needs_vllm_line

pytestmark = [
    needs_vllm_line("0.20", why="the 0.20 line's LogitBiasState and PluginSampler"),
    pytest.mark.skipif(
        __import__("torch").cuda.is_available(),
        reason="CPU-only: on a GPU vLLM 0.20's kernel is the racy one (tests/e2e/test_allowed_tokens.py)",
    ),
]

SNIPPET = r'''
import json
import numpy as np
import torch
import vllm.v1.worker.gpu.buffer_utils as buffer_utils

class HostBuffer:
    """UvaBuffer without pinning: the 'device' view is the host tensor."""
    def __init__(self, size, dtype):
        self.cpu = torch.zeros(size, dtype=dtype)
        self.np = self.cpu.numpy()
        self.uva = self.cpu

buffer_utils.UvaBuffer = HostBuffer
buffer_utils.async_tensor_h2d = (
    lambda data, dtype, target_device, pin_memory: torch.tensor(data, dtype=dtype))

from types import SimpleNamespace
from vllm.sampling_params import SamplingParams
from vllm.v1.worker.gpu.sample.logit_bias import LogitBiasState
from vllm.v1.worker.gpu.states import RequestState
import vllm_sampling_plugin.integration.draw.sample_logit_bias as integration
from vllm_sampling_plugin.config import PluginSettings
from vllm_sampling_plugin.integration.verification.rejection_sampler_0_20 import PluginRejectionSampler
from vllm_sampling_plugin.integration.draw.sample import PluginSampler

VOCAB, MAX_REQS, PROMPT_LEN, SPEC_STEPS = 3000, 6, 4, 3
CPU = torch.device("cpu")
out = {}

def stop_params(**fields):
    params = SamplingParams(**fields)
    # What the front-end adds from the generation config (EOS and stop ids).
    params._all_stop_token_ids = {1, 2999, 17, 5}
    return params

REQUESTS = [
    SamplingParams(allowed_token_ids=[47, 40, 45, 2048, 40, 41, 2999]),
    SamplingParams(logit_bias={2500: 3.0, 7: -1.5, 1024: 0.25, 40: 100.0}),
    stop_params(min_tokens=3),
    stop_params(allowed_token_ids=[17, 40, 41, 1500], logit_bias={41: 2.0, 17: 1.0, 9: 5.0},
                min_tokens=2),
    SamplingParams(),  # nothing to apply
]

def build(state_cls):
    state = state_cls(MAX_REQS, CPU)
    for req_idx, params in enumerate(REQUESTS):
        state.add_request(req_idx, PROMPT_LEN, params)
    state.apply_staged_writes()
    return state

# Every request at five positions; logits at position p draw output p + 1 - PROMPT_LEN.
rows = [r for r in range(len(REQUESTS)) for _ in range(5)]
pos = [PROMPT_LEN - 1 + k for _ in REQUESTS for k in range(5)]
logits = torch.randn(len(rows), VOCAB, generator=torch.Generator().manual_seed(3)) * 3
processed = {}
for name, cls in (("plugin", integration.RaceFreeLogitBiasState), ("stock", LogitBiasState)):
    x = logits.clone()
    build(cls).apply_logit_bias(x, torch.tensor(rows, dtype=torch.int32),
                                np.arange(len(REQUESTS), dtype=np.int32),
                                torch.tensor(pos, dtype=torch.int64))
    processed[name] = x
plugin, stock = processed["plugin"], processed["stock"]
out["rows"], out["pos"] = rows, pos
out["differ"] = [(i, t, stock[i, t].item(), plugin[i, t].item())
                 for i, t in (plugin != stock).nonzero().tolist()]
out["changed"] = (plugin != logits).any(dim=1).tolist()
out["finite"] = [plugin[i].isfinite().nonzero().flatten().tolist() if REQUESTS[r].allowed_token_ids
                 else None for i, r in enumerate(rows)]
out["stops"] = sorted(REQUESTS[2].all_stop_token_ids)
out["min_tokens"] = [p.min_tokens for p in REQUESTS]

state = build(integration.RaceFreeLogitBiasState)
out["staged"] = {
    "allowed": state.allowed_token_ids.gpu[0, :int(state.num_allowed_token_ids.np[0])].tolist(),
    "bias_ids": state.logit_bias_token_ids.gpu[1, :4].tolist(),
    "bias": state.logit_bias.gpu[1, :4].tolist(),
    "stop": state.stop_token_ids.gpu[2, :4].tolist(),
}
request = REQUESTS[3]
out["request_kept"] = [request.allowed_token_ids, list(request.logit_bias),
                       type(request.all_stop_token_ids).__name__]

# A real PluginSampler and PluginRejectionSampler, counting the plugin kernel's launches.
launches = []
kernel = integration.apply_logit_bias_
def counting(logits, *args, **kwargs):
    launches.append(logits.shape[0])
    return kernel(logits, *args, **kwargs)
integration.apply_logit_bias_ = counting

req_states = RequestState(max_num_reqs=MAX_REQS, max_model_len=64, max_num_batched_tokens=64,
                          num_speculative_steps=SPEC_STEPS, vocab_size=VOCAB, device=CPU)
sampler = PluginSampler(max_num_reqs=MAX_REQS, vocab_size=VOCAB, device=CPU,
                        req_states=req_states, num_speculative_tokens=SPEC_STEPS + 1,
                        settings=PluginSettings(flashinfer_sampler=False))
rejection_sampler = PluginRejectionSampler(
    sampler, SimpleNamespace(num_speculative_tokens=SPEC_STEPS, rejection_sample_method="strict"),
    CPU)
out["state"] = type(sampler.logit_bias_state).__name__
ALLOWED = [40, 41, 42, 43, 44, 45, 46, 47]
params = [
    SamplingParams(temperature=0.0, allowed_token_ids=ALLOWED),
    SamplingParams(temperature=1.0, seed=1, allowed_token_ids=ALLOWED),
    SamplingParams(temperature=1.0, seed=2, top_k=3, allowed_token_ids=ALLOWED),
    SamplingParams(temperature=0.8, seed=3, top_p=0.5, allowed_token_ids=ALLOWED[::-1]),
]
for req_idx, p in enumerate(params):
    sampler.add_request(req_idx, PROMPT_LEN, p)
sampler.apply_staged_writes()

def batch(per_req):
    """Every request with ``per_req`` logits (1: a plain step; 1 + K: verifying K drafts)."""
    n = len(params)
    local = torch.arange(per_req, dtype=torch.int32).repeat(n)
    return SimpleNamespace(
        num_reqs=n, idx_mapping=torch.arange(n, dtype=torch.int32),
        idx_mapping_np=np.arange(n, dtype=np.int32),
        expanded_idx_mapping=torch.arange(n, dtype=torch.int32).repeat_interleave(per_req),
        expanded_local_pos=local,
        cu_num_logits=torch.arange(0, n * per_req + 1, per_req, dtype=torch.int32),
        cu_num_logits_np=np.arange(0, n * per_req + 1, per_req, dtype=np.int32),
        logits_indices=torch.arange(n * per_req, dtype=torch.int64),
        positions=PROMPT_LEN - 1 + local.long(),
        # Last sampled token, then drafts: 3 is never allowed, so it is rejected.
        input_ids=torch.tensor([40, 3, 41, 42] * n)[: n * per_req],
        seq_lens=torch.ones(n, dtype=torch.int32),
    )

# Logits that favour tokens outside the set.
spec_logits = torch.randn(len(params) * (1 + SPEC_STEPS), VOCAB,
                          generator=torch.Generator().manual_seed(0))
spec_logits[:, :40] += 20.0
plain = sampler(spec_logits[:len(params)].clone(), batch(1))
verified = rejection_sampler(spec_logits.clone(), batch(1 + SPEC_STEPS))
out["launches"] = launches
out["plain"] = plain.sampled_token_ids.flatten().tolist()
out["verified"] = verified.sampled_token_ids[:, 0].tolist()
out["num_sampled"] = verified.num_sampled.tolist()
out["greedy_best"] = 40 + int(spec_logits[0, 40:48].argmax())
print(json.dumps(out))
'''


@pytest.fixture(scope="module")
def recorded() -> dict:
    stdout = run_python(SNIPPET, env={"CUDA_VISIBLE_DEVICES": "", "TRITON_INTERPRET": "1"})
    return json.loads(stdout.strip().splitlines()[-1])


def test_agrees_with_vllm_020s_kernel_but_at_the_min_tokens_boundary(recorded):
    rows, pos, min_tokens = recorded["rows"], recorded["pos"], recorded["min_tokens"]
    prompt_len = 4
    boundary = {
        i for i, (r, p) in enumerate(zip(rows, pos)) if min_tokens[r] and p + 1 - prompt_len == min_tokens[r]
    }
    assert len(boundary) == 2
    # Every difference: a stop token on a boundary row, -inf in stock (masked
    # one output too long) and finite in the plugin's.
    assert recorded["differ"]
    for i, token, stock, plugin in recorded["differ"]:
        assert i in boundary and token in recorded["stops"]
        assert stock == float("-inf") and plugin != float("-inf")
    # Not vacuous: every request but the one using nothing changed its rows.
    changed = [any(recorded["changed"][5 * r : 5 * r + 5]) for r in range(5)]
    assert changed == [True, True, True, True, False]


def test_allowed_tokens_are_the_only_finite_logits(recorded):
    for i, (r, finite) in enumerate(zip(recorded["rows"], recorded["finite"])):
        if r == 0:
            assert finite == [40, 41, 45, 47, 2048, 2999]
        elif r == 3:  # allowed {17, 40, 41, 1500}; stop id 17 masked for 2 outputs
            masked = recorded["pos"][i] + 1 - 4 < 2
            assert finite == ([40, 41, 1500] if masked else [17, 40, 41, 1500])


def test_lists_are_staged_sorted_and_the_request_keeps_its_own(recorded):
    staged = recorded["staged"]
    assert staged["allowed"] == [40, 41, 45, 47, 2048, 2999]  # sorted, duplicates dropped
    assert staged["bias_ids"] == [7, 40, 1024, 2500]
    assert staged["bias"] == [-1.5, 100.0, 0.25, 3.0]
    assert staged["stop"] == [1, 5, 17, 2999]
    assert recorded["request_kept"] == [[17, 40, 41, 1500], [41, 17, 9], "set"]


def test_sampler_and_rejection_sampler_draw_allowed_tokens_through_the_plugins_kernel(recorded):
    allowed = set(range(40, 48))
    assert recorded["state"] == "RaceFreeLogitBiasState"
    # The sampler's step (4 logits), then verification's (4 x (1 + 3) logits).
    assert recorded["launches"] == [4, 16]
    assert set(recorded["plain"]) <= allowed
    assert recorded["plain"][0] == recorded["greedy_best"]
    assert set(recorded["verified"]) <= allowed
    assert recorded["num_sampled"] == [1, 1, 1, 1]  # draft 3 is never allowed
