"""One-token and mixed-length decode steps under n-gram speculation dispatch
to full CUDA graphs (integration/speculator/decode_graphs.py), against the real CUDA
graph manager of vLLM 0.32 / 0.33 on the CPU.

The manager is vLLM's own ``ModelCudaGraphManager`` with its candidate table
built by its own ``_init_candidates``; only what a CPU lacks is stubbed (the
pipeline-parallel group it asks for its rank, the graph memory pool). Nothing
is captured (vLLM's ``capture`` is replaced by a recorder where the test needs
the plugin's wrapper of it): ``dispatch`` is asked which descriptor each batch
shape would replay.
"""

import json

import pytest

from tests.integration.helpers import CPU_DEVICE_SHIM, run_python
from tests.tiny_model import write_tiny_llama
from tests.vllm_lines import needs_vllm_line

pytestmark = needs_vllm_line("0.32", "0.33", why="candidates keyed by (tokens, LoRA case)")

DISPATCH = """
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

K, MAX_SEQS, SIZES = 3, 8, [1, 2, 4, 8, 16, 32]
log = []
graph_log = lambda: [line for line in log if "mixed draft lengths" in line]

def manager(policy, lora_cases=None):
    vllm_config = EngineArgs(
        model=MODEL, load_format="dummy", max_model_len=256, max_num_seqs=MAX_SEQS,
        speculative_config={"method": "ngram", "num_speculative_tokens": K,
                            "prompt_lookup_min": 2, "prompt_lookup_max": 3},
        speculation_policy=policy,
    ).create_engine_config()
    vllm_config.compilation_config.cudagraph_capture_sizes = SIZES
    vllm_config.compilation_config.max_cudagraph_capture_size = SIZES[-1]
    m = cg.ModelCudaGraphManager(
        vllm_config, torch.device("cpu"), CUDAGraphMode.FULL_AND_PIECEWISE,
        decode_query_len=1 + K, lora_capture_cases=lora_cases,
    )
    m._graphs_captured = True
    return m

def captured(m, support=AttentionCGSupport.ALWAYS):
    # The plugin's wrapper of capture around a recorder, with one attention
    # group whose builder reports `support`.
    def record(self, model, model_state, input_buffers, intermediate_tensors,
               block_tables, attn_groups, kv_cache_config, **kwargs):
        self.bounded = sorted((d.num_tokens, d.num_reqs, d.num_active_loras)
                              for d in self._capture_descs[CUDAGraphMode.FULL]
                              if d.max_query_len is not None)
    builder = types.SimpleNamespace(get_cudagraph_support=lambda config, spec: support)
    group = types.SimpleNamespace(get_metadata_builder=lambda i: builder, kv_cache_spec=None)
    # Attached here: building the engine config reconfigures vLLM's loggers,
    # which drops the handlers of their children.
    plugin_logger = logging.getLogger("vllm.vllm_sampling_plugin")
    plugin_logger.setLevel(logging.INFO)
    plugin_logger.handlers = [
        type("H", (logging.Handler,), {"emit": lambda self, r: log.append(r.getMessage())})()]
    decode_graphs.adding_mixed_decode_graphs(record)(
        m, None, None, None, None, None, [[group]], None)
    return m

def show(desc):
    return [desc.cg_mode.name, desc.num_tokens, desc.num_reqs, desc.uniform_token_count,
            desc.max_query_len]

def dispatch(m, num_reqs, num_tokens, uniform, loras=0):
    max_query_len = uniform or num_tokens
    return show(m.dispatch(num_reqs, num_tokens, uniform, loras, max_query_len=max_query_len))

def step(m, query_lens, prefill=False, loras=0):
    # What GPUModelRunner.execute_model hands dispatch (0.33.0
    # model_runner.py:1799-1811): the common query length of a uniform
    # decode step, and the longest query, None with a prefill.
    num_reqs, num_tokens = len(query_lens), sum(query_lens)
    uniform = query_lens[0] if len(set(query_lens)) == 1 and not prefill else None
    return show(m.dispatch(num_reqs, num_tokens, uniform, loras,
                           max_query_len=None if prefill else max(query_lens)))
"""


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> str:
    return str(write_tiny_llama(tmp_path_factory.mktemp("tiny")))


def run(tiny_model: str, code: str):
    # vLLM 0.32 refuses the V2 runner without Triton; its triton_utils gives
    # the real one on a machine without a GPU only with CUDA_VISIBLE_DEVICES empty.
    out = run_python(
        prelude=CPU_DEVICE_SHIM + f"MODEL = {tiny_model!r}\n" + DISPATCH,
        code=code,
        env={"CUDA_VISIBLE_DEVICES": ""},
    )
    return json.loads(out.strip().splitlines()[-1])


def test_one_token_batches_replay_full_graphs_under_the_adaptive_policy(tiny_model):
    got = run(
        tiny_model,
        """
        m = manager("adaptive")
        full_one = sorted(d.num_tokens for d in m._capture_descs[CUDAGraphMode.FULL]
                          if d.uniform_token_count == 1)
        print(json.dumps({
            "captured": full_one,
            "one_token_5": dispatch(m, 5, 5, 1),
            "one_token_8": dispatch(m, 8, 8, 1),
            "all_verify_k": dispatch(m, 2, 8, 1 + K),
            "mixed": dispatch(m, 3, 7, None),
            # More one-token requests than max_num_seqs cannot happen; 9
            # tokens of a mixed batch pad to the piecewise 16.
            "mixed_9": dispatch(m, 4, 9, None),
        }))
        """,
    )
    assert got["captured"] == [1, 2, 4, 8]  # capture sizes up to max_num_seqs
    assert got["one_token_5"] == ["FULL", 8, 8, 1, None]
    assert got["one_token_8"] == ["FULL", 8, 8, 1, None]
    assert got["all_verify_k"] == ["FULL", 8, 2, 4, None]  # vLLM's own 1 + k graph
    assert got["mixed"] == ["PIECEWISE", 8, None, None, None]
    assert got["mixed_9"] == ["PIECEWISE", 16, None, None, None]


def test_fixed_policy_keeps_vllms_candidates(tiny_model):
    got = run(
        tiny_model,
        """
        m = manager("fixed")
        print(json.dumps({
            "one_token": dispatch(m, 5, 5, 1),
            "all_verify_k": dispatch(m, 2, 8, 1 + K),
        }))
        """,
    )
    # Without the added graphs a one-token batch runs piecewise.
    assert got["one_token"] == ["PIECEWISE", 8, None, None, None]
    assert got["all_verify_k"] == ["FULL", 8, 2, 4, None]


def test_every_lora_case_gets_its_one_token_graphs(tiny_model):
    got = run(
        tiny_model,
        """
        m = manager("adaptive", lora_cases=[0, 2])
        print(json.dumps({
            "no_lora": dispatch(m, 3, 3, 1, loras=0),
            "two_loras": dispatch(m, 3, 3, 1, loras=2),
            "loras_of_one_token_graphs": sorted(
                {d.num_active_loras for d in m._capture_descs[CUDAGraphMode.FULL]
                 if d.uniform_token_count == 1}),
        }))
        """,
    )
    assert got["no_lora"] == ["FULL", 4, 4, 1, None]
    assert got["two_loras"] == ["FULL", 4, 4, 1, None]
    assert got["loras_of_one_token_graphs"] == [0, 2]


def test_mixed_length_decode_steps_replay_query_bounded_graphs(tiny_model):
    got = run(
        tiny_model,
        """
        m = captured(manager("adaptive"))
        with_loras = captured(manager("adaptive", lora_cases=[0, 2]))
        print(json.dumps({
            "bounded": m.bounded,
            "four_reqs_seven_tokens": step(m, [4, 1, 1, 1]),
            "five_reqs_twelve_tokens": step(m, [4, 4, 1, 1, 2]),
            "eight_reqs_seventeen_tokens": step(m, [4, 4, 4, 1, 1, 1, 1, 1]),
            "eight_reqs_all_k": step(m, [4] * 8),
            "one_token": step(m, [1] * 6),
            "with_a_prefill": step(m, [4, 1, 3], prefill=True),
            "log": graph_log(),
            "loras": sorted({d[2] for d in with_loras.bounded}),
            "two_loras": step(with_loras, [4, 1, 1, 1], loras=2),
        }))
        """,
    )
    # Every capture size up to 8 * (1 + k) = 32 tokens, at most 8 requests of at most 1 + k tokens.
    assert got["bounded"] == [[1, 1, 0], [2, 2, 0], [4, 4, 0], [8, 8, 0], [16, 8, 0], [32, 8, 0]]
    assert got["four_reqs_seven_tokens"] == ["FULL", 8, 8, None, 4]
    assert got["five_reqs_twelve_tokens"] == ["FULL", 16, 8, None, 4]
    assert got["eight_reqs_seventeen_tokens"] == ["FULL", 32, 8, None, 4]
    # Uniform steps keep the graphs made for them.
    assert got["eight_reqs_all_k"] == ["FULL", 32, 8, 4, None]
    assert got["one_token"] == ["FULL", 8, 8, 1, None]
    # A step with a prefill, even a short one, keeps vLLM's piecewise graph.
    assert got["with_a_prefill"] == ["PIECEWISE", 8, None, None, None]
    assert got["log"] == [
        "vllm-sampling-plugin adaptive speculation: full CUDA graphs for decode steps of mixed draft lengths"
        f" up to 32 tokens ({added} more captured)."
        for added in (6, 12)  # one set per LoRA case
    ]
    # Each LoRA case gets its own.
    assert got["loras"] == [0, 2]
    assert got["two_loras"] == ["FULL", 8, 8, None, 4]


def test_no_mixed_length_graphs_under_fixed_k_or_attention_without_full_graphs_for_any_batch(tiny_model):
    got = run(
        tiny_model,
        """
        uniform_only = captured(manager("adaptive"), support=AttentionCGSupport.UNIFORM_BATCH)
        uniform_only_log = graph_log()
        fixed = captured(manager("fixed"))
        print(json.dumps({
            "bounded": [uniform_only.bounded, fixed.bounded],
            "mixed": [step(m, [4, 4, 4, 1, 1, 1, 1, 1]) for m in (uniform_only, fixed)],
            "log": [uniform_only_log, graph_log()[len(uniform_only_log):]],
        }))
        """,
    )
    assert got["bounded"] == [[], []]
    assert got["mixed"] == [["PIECEWISE", 32, None, None, None]] * 2
    assert got["log"] == [
        [
            "vllm-sampling-plugin adaptive speculation: decode steps of mixed draft lengths run piecewise CUDA graphs"
            " (SimpleNamespace supports full graphs for UNIFORM_BATCH batches only)."
        ],
        [],
    ]
