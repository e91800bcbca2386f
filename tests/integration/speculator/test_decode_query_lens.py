"""vLLM 0.34's CUDA graph manager is built with the uniform decode query
lengths it captures (``decode_query_lens``): under the adaptive policy the
plugin adds the one-token length, and upstream's own ``_init_candidates``
and ``dispatch`` capture and replay those graphs (decode_graphs.py's
``adding_one_token_decode_query``); under ``fixed`` the map is upstream's.
Run against vLLM's real manager on the CPU, nothing captured: ``dispatch``
is asked which descriptor each batch shape would replay."""

import pytest

from tests.integration.helpers import CPU_DEVICE_SHIM, run_python
from tests.tiny_model import write_tiny_llama
from tests.vllm_lines import needs_vllm_line

pytestmark = needs_vllm_line("0.34", why="ModelCudaGraphManager(decode_query_lens=...)")

CODE = """
import json, os, types
import torch
from vllm.plugins import load_general_plugins
load_general_plugins()
from vllm.config import CUDAGraphMode
from vllm.engine.arg_utils import EngineArgs
import vllm.v1.worker.gpu.cudagraph_utils as cg

cg.get_pp_group = lambda: types.SimpleNamespace(is_first_rank=True, is_last_rank=True)
cg.current_platform.get_global_graph_pool = lambda: None
K, MAX_SEQS = 3, 8

def dispatched(policy, method):
    vllm_config = EngineArgs(
        model=MODEL, load_format="dummy", max_model_len=256, max_num_seqs=MAX_SEQS,
        speculative_config={"method": method, "num_speculative_tokens": K},
        speculation_policy=policy,
    ).create_engine_config()
    vllm_config.compilation_config.decode_cudagraph_capture_request_sizes = [1, 2, 4, 8]
    vllm_config.compilation_config.max_cudagraph_capture_size = 64
    m = cg.ModelCudaGraphManager(
        vllm_config, torch.device("cpu"), CUDAGraphMode.FULL_AND_PIECEWISE,
        decode_query_lens=vllm_config.get_decode_cudagraph_query_lens(1 + K),
    )
    m._graphs_captured = True
    shapes = {}
    for q in (1, 1 + K):
        desc = m.dispatch(num_reqs=4, num_tokens=4 * q, uniform_token_count=q,
                          num_active_loras=0, max_query_len=q)
        shapes[q] = [desc.cg_mode.name, desc.uniform_token_count]
    return sorted(m.decode_max_reqs), shapes, sorted({q for q, _, _ in m._decode_descs})

print(json.dumps({f"{policy}/{method}": dispatched(policy, method)
                  for policy in ("adaptive", "fixed") for method in ("ngram", "suffix")}))
"""


def test_one_token_decode_steps_get_full_graphs_under_the_adaptive_policy(tmp_path):
    model = write_tiny_llama(tmp_path / "tiny")
    out = run_python(f"MODEL = {str(model)!r}\n" + CODE, prelude=CPU_DEVICE_SHIM)
    import json

    result = json.loads(out.strip().splitlines()[-1])
    for method in ("ngram", "suffix"):
        lengths, shapes, captured = result[f"adaptive/{method}"]
        assert lengths == captured == [1, 1 + 3]
        assert shapes == {"1": ["FULL", 1], "4": ["FULL", 4]}
        lengths, shapes, captured = result[f"fixed/{method}"]
        assert lengths == captured == [1 + 3]
        assert shapes["4"] == ["FULL", 4] and shapes["1"][1] != 1


VARLEN_CODE = CODE.split("print(json.dumps(")[0] + """
from vllm.v1.attention.backend import AttentionCGSupport
from vllm_sampling_plugin.integration.speculator import decode_graphs

class Builder:
    def __init__(self, support, bound):
        self.support, self.bound = support, bound
    def get_cudagraph_support(self, vllm_config, spec):
        return self.support
    def get_varlen_cudagraph_max_query_len(self, vllm_config, spec):
        return self.bound

class FlashAttentionBackend:
    pass

def group(support, bound=None):
    return types.SimpleNamespace(
        get_metadata_builder=lambda i: Builder(support, bound), kv_cache_spec=None,
        layer_names={"model.layers.0.self_attn.attn"}, backend=FlashAttentionBackend)

def fake_capture(self, model, model_state, input_buffers, intermediate_tensors,
                 block_tables, attn_groups, kv_cache_config, pcp_manager=None):
    pass

def mixed_steps(policy, support, bound=None):
    vllm_config = EngineArgs(
        model=MODEL, load_format="dummy", max_model_len=256, max_num_seqs=MAX_SEQS,
        speculative_config={"method": "suffix", "num_speculative_tokens": K},
        speculation_policy=policy,
    ).create_engine_config()
    vllm_config.compilation_config.decode_cudagraph_capture_request_sizes = [1, 2, 4, 8]
    vllm_config.compilation_config.max_decode_cudagraph_capture_requests = 8
    vllm_config.compilation_config.prefill_cudagraph_capture_token_sizes = [1, 2, 4, 8, 16, 32]
    vllm_config.compilation_config.cudagraph_capture_sizes = [1, 2, 4, 8, 16, 32, 64]
    vllm_config.compilation_config.max_cudagraph_capture_size = 64
    m = cg.ModelCudaGraphManager(
        vllm_config, torch.device("cpu"), CUDAGraphMode.FULL_AND_PIECEWISE,
        decode_query_lens=vllm_config.get_decode_cudagraph_query_lens(1 + K),
    )
    decode_graphs.adding_mixed_decode_graphs(fake_capture)(
        m, None, None, None, None, None, [[group(support, bound)]], None)
    m._graphs_captured = True
    steps = {"mixed": (4, 10, None, 4), "one-token": (4, 4, 1, 1), "full-drafts": (4, 16, 4, 4),
             "prefill": (4, 10, None, None)}
    shapes = {}
    for name, (reqs, tokens, uniform, longest) in steps.items():
        desc = m.dispatch(num_reqs=reqs, num_tokens=tokens, uniform_token_count=uniform,
                          num_active_loras=0, max_query_len=longest)
        shapes[name] = [desc.cg_mode.name, desc.num_tokens, desc.max_query_len]
    bounded = [d.num_tokens for d in m._capture_descs[CUDAGraphMode.FULL] if d.max_query_len]
    return sorted(bounded), shapes

print(json.dumps({
    # The plugin installed the wrapper on vLLM's manager (run below on a stand-in capture).
    "installed": cg.ModelCudaGraphManager.capture.__code__.co_filename.endswith("decode_graphs.py"),
    "adaptive": mixed_steps("adaptive", AttentionCGSupport.ALWAYS),
    "adaptive-bounded": mixed_steps("adaptive", AttentionCGSupport.UNIFORM_BATCH, 2),
    "fixed": mixed_steps("fixed", AttentionCGSupport.ALWAYS),
}))
"""


def test_mixed_length_decode_steps_replay_full_graphs(tmp_path):
    """Under the adaptive policy, where the target's attention replays any
    batch from a full graph, the manager also captures full graphs bounding
    the longest query at 1 + k: a step mixing requests with and without
    drafts replays one instead of a piecewise graph, the uniform steps keep
    upstream's uniform graphs, and a step with a prefill stays piecewise. A
    backend that replays uniform batches only, and the fixed policy, leave
    upstream's graphs as they are."""
    model = write_tiny_llama(tmp_path / "tiny")
    out = run_python(f"MODEL = {str(model)!r}\n" + VARLEN_CODE, prelude=CPU_DEVICE_SHIM)
    import json

    result = json.loads(out.strip().splitlines()[-1])
    assert result["installed"]
    bounded, shapes = result["adaptive"]
    # Every capture size up to max_num_seqs x (1 + k) = 32 tokens.
    assert bounded == [1, 2, 4, 8, 16, 32]
    assert shapes == {"mixed": ["FULL", 16, 4], "one-token": ["FULL", 4, None],
                      "full-drafts": ["FULL", 16, None], "prefill": ["PIECEWISE", 16, None]}
    for case in ("adaptive-bounded", "fixed"):
        bounded, shapes = result[case]
        assert bounded == []
        assert shapes["mixed"][0] == "PIECEWISE" and shapes["full-drafts"][0] == "FULL"
    assert result["adaptive-bounded"][1]["one-token"][0] == "FULL"
