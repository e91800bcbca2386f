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
