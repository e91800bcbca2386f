"""One-token decode steps under n-gram speculation dispatch to full CUDA graphs
(integration/decode_graphs.py), against the real CUDA graph manager of vLLM
0.32 / 0.33 on the CPU.

The manager is vLLM's own ``ModelCudaGraphManager`` with its candidate table
built by its own ``_init_candidates``; only what a CPU lacks is stubbed (the
pipeline-parallel group it asks for its rank, the graph memory pool). Nothing
is captured: ``dispatch`` is asked which descriptor each batch shape would
replay.
"""

import json

import pytest

from tests.integration.helpers import CPU_DEVICE_SHIM, run_python
from tests.tiny_model import write_tiny_llama
from tests.vllm_lines import needs_vllm_line

pytestmark = needs_vllm_line("0.32", "0.33", why="candidates keyed by (tokens, LoRA case)")

DISPATCH = """
import json, os, types
os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "1"
import torch
from vllm.plugins import load_general_plugins
load_general_plugins()
from vllm.config import CUDAGraphMode
from vllm.engine.arg_utils import EngineArgs
import vllm.v1.worker.gpu.cudagraph_utils as cg

cg.get_pp_group = lambda: types.SimpleNamespace(is_first_rank=True, is_last_rank=True)
cg.current_platform.get_global_graph_pool = lambda: None

K, MAX_SEQS, SIZES = 3, 8, [1, 2, 4, 8, 16, 32]

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

def show(desc):
    return [desc.cg_mode.name, desc.num_tokens, desc.num_reqs, desc.uniform_token_count]

def dispatch(m, num_reqs, num_tokens, uniform, loras=0):
    max_query_len = uniform or num_tokens
    return show(m.dispatch(num_reqs, num_tokens, uniform, loras, max_query_len=max_query_len))
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
    assert got["one_token_5"] == ["FULL", 8, 8, 1]
    assert got["one_token_8"] == ["FULL", 8, 8, 1]
    assert got["all_verify_k"] == ["FULL", 8, 2, 4]  # vLLM's own 1 + k graph
    assert got["mixed"] == ["PIECEWISE", 8, None, None]
    assert got["mixed_9"] == ["PIECEWISE", 16, None, None]


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
    assert got["one_token"] == ["PIECEWISE", 8, None, None]
    assert got["all_verify_k"] == ["FULL", 8, 2, 4]


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
    assert got["no_lora"] == ["FULL", 4, 4, 1]
    assert got["two_loras"] == ["FULL", 4, 4, 1]
    assert got["loras_of_one_token_graphs"] == [0, 2]
