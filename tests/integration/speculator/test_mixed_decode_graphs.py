"""Decode steps of mixed draft lengths under the adaptive policy replay full
CUDA graphs where the target's attention replays any batch
(integration/speculator/decode_graphs.py), against vLLM 0.20's own CUDA graph manager on
the CPU.

The manager is vLLM's ``ModelCudaGraphManager`` with its candidate table built
by its own ``_init_candidates`` (and the plugin's one-token graphs); only what
a CPU lacks is stubbed (the pipeline-parallel group, the graph memory pool).
vLLM's capture itself is replaced by a recorder, so nothing is captured:
``dispatch`` is asked which descriptor each step would replay.
"""

import json

import pytest

from tests.integration.helpers import CPU_DEVICE_SHIM, run_python
from tests.tiny_model import write_tiny_llama
from tests.vllm_lines import needs_vllm_line

pytestmark = needs_vllm_line("0.20", why="dispatch takes only the batch shape")

MANAGER = """
import json, logging, os, types
os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "1"
import torch
from vllm.plugins import load_general_plugins
load_general_plugins()
from vllm.config import CUDAGraphMode
from vllm.engine.arg_utils import EngineArgs
from vllm.v1.attention.backend import AttentionCGSupport
import vllm.v1.worker.gpu.cudagraph_utils as cg
from vllm_sampling_plugin.integration.speculator import decode_graphs

cg.get_pp_group = lambda: types.SimpleNamespace(is_first_rank=True, is_last_rank=True)
cg.current_platform.get_global_graph_pool = lambda: None

K, MAX_SEQS, SIZES = 3, 8, [1, 2, 4, 8, 16, 24, 32, 48]
log = []
logging.getLogger("vllm.vllm_sampling_plugin").setLevel(logging.INFO)
logging.getLogger("vllm.vllm_sampling_plugin").addHandler(
    type("H", (logging.Handler,), {"emit": lambda self, r: log.append(r.getMessage())})())
graph_log = lambda: [line for line in log if "mixed draft lengths" in line]

def manager(policy, support=AttentionCGSupport.ALWAYS):
    vllm_config = EngineArgs(
        model=MODEL, load_format="dummy", max_model_len=256, max_num_seqs=MAX_SEQS,
        speculative_config={"method": "ngram", "num_speculative_tokens": K,
                            "prompt_lookup_min": 2, "prompt_lookup_max": 3},
        speculation_policy=policy,
    ).create_engine_config()
    vllm_config.compilation_config.cudagraph_capture_sizes = SIZES
    vllm_config.compilation_config.max_cudagraph_capture_size = SIZES[-1]
    m = cg.ModelCudaGraphManager(
        vllm_config, torch.device("cpu"), CUDAGraphMode.FULL_AND_PIECEWISE, decode_query_len=1 + K)
    # vLLM's capture replaced by a recorder of what it would capture.
    def record(self, model, model_state, input_buffers, intermediate_tensors,
               block_tables, attn_groups, kv_cache_config, **kwargs):
        self.captured = {mode.name: sorted(((d.num_tokens, d.num_reqs, d.uniform_token_count)
                                            for d in descs), key=lambda d: (d[0], d[2] or 0))
                         for mode, descs in self._capture_descs.items()}
        self._graphs_captured = True
    builder = types.SimpleNamespace(get_cudagraph_support=lambda config, spec: support)
    group = types.SimpleNamespace(get_metadata_builder=lambda i: builder, kv_cache_spec=None)
    decode_graphs.adding_mixed_decode_graphs(record)(
        m, None, None, None, None, None, [[group]], None)
    return m

def show(desc):
    return [desc.cg_mode.name, desc.num_tokens, desc.num_reqs, desc.uniform_token_count]

def step(m, query_lens):
    # What GPUModelRunner.execute_model hands dispatch (model_runner.py:975-995).
    runner = types.SimpleNamespace(cudagraph_manager=m)
    output = types.SimpleNamespace(num_scheduled_tokens=dict(enumerate(query_lens)))
    decode_graphs.noting_decode_steps(lambda self, so: None)(runner, output)
    num_reqs, num_tokens = len(query_lens), sum(query_lens)
    uniform = cg.get_uniform_token_count(num_reqs, num_tokens, max(query_lens))
    return show(m.dispatch(num_reqs, num_tokens, uniform))
"""


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> str:
    return str(write_tiny_llama(tmp_path_factory.mktemp("tiny")))


def run(tiny_model: str, code: str):
    out = run_python(prelude=CPU_DEVICE_SHIM + f"MODEL = {tiny_model!r}\n" + MANAGER, code=code)
    return json.loads(out.strip().splitlines()[-1])


def test_mixed_length_decode_steps_replay_full_graphs(tiny_model):
    got = run(
        tiny_model,
        """
        m = manager("adaptive")
        print(json.dumps({
            "full": [d for d in m.captured["FULL"] if d[2] is None],
            "four_reqs_seven_tokens": step(m, [4, 1, 1, 1]),
            "five_reqs_twelve_tokens": step(m, [4, 4, 1, 1, 2]),
            "eight_reqs_seventeen_tokens": step(m, [4, 4, 4, 1, 1, 1, 1, 1]),
            "eight_reqs_all_k": step(m, [4] * 8),
            "one_token": step(m, [1] * 6),
            "with_a_prefill": step(m, [4, 1, 9]),
            "log": graph_log(),
        }))
        """,
    )
    # Above max_num_seqs (8) up to 8 * (1 + k) = 32 tokens, one graph of 8 requests per size.
    assert got["full"] == [[16, 8, None], [24, 8, None], [32, 8, None]]
    # 7 tokens, 4 requests: the one-token graph of 8 tokens has a slot per token.
    assert got["four_reqs_seven_tokens"] == ["FULL", 8, 8, 1]
    assert got["five_reqs_twelve_tokens"] == ["FULL", 16, 8, None]
    assert got["eight_reqs_seventeen_tokens"] == ["FULL", 24, 8, None]
    # vLLM's own graphs where the step is uniform.
    assert got["eight_reqs_all_k"] == ["FULL", 32, 8, 4]
    assert got["one_token"] == ["FULL", 8, 8, 1]
    # A request of 9 tokens is a prefill: vLLM's piecewise graph.
    assert got["with_a_prefill"] == ["PIECEWISE", 16, None, None]
    assert got["log"] == [
        "vllm-sampling-plugin adaptive speculation: full CUDA graphs for decode steps of mixed draft lengths"
        " up to 32 tokens (3 more captured)."
    ]


def test_attention_without_full_graphs_for_any_batch_keeps_mixed_steps_piecewise(tiny_model):
    got = run(
        tiny_model,
        """
        m = manager("adaptive", support=AttentionCGSupport.UNIFORM_BATCH)
        print(json.dumps({
            "full": [d for d in m.captured["FULL"] if d[2] is None],
            "mixed": step(m, [4, 4, 4, 1, 1, 1, 1, 1]),
            "log": graph_log(),
        }))
        """,
    )
    assert got["full"] == []
    assert got["mixed"] == ["PIECEWISE", 24, None, None]
    assert got["log"] == [
        "vllm-sampling-plugin adaptive speculation: decode steps of mixed draft lengths run piecewise CUDA graphs"
        " (SimpleNamespace supports full graphs for UNIFORM_BATCH batches only)."
    ]


def test_fixed_policy_captures_no_mixed_length_graphs(tiny_model):
    got = run(
        tiny_model,
        """
        m = manager("fixed")
        print(json.dumps({
            "full": [d for d in m.captured["FULL"] if d[2] is None],
            "mixed": step(m, [4, 4, 4, 1, 1, 1, 1, 1]),
            "log": graph_log(),
        }))
        """,
    )
    assert got == {"full": [], "mixed": ["PIECEWISE", 24, None, None], "log": []}
