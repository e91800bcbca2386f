"""NgramProposerGPU against vLLM 0.20's duck-typed speculator contract.

vLLM's RequestState allocates pinned host memory, which needs a GPU, so the
CPU tests use minimal stand-ins with the same fields; the GPU test uses the
real RequestState.
"""

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from tests.vllm_lines import skip_module_unless_line

# Before the imports below: vLLM 0.34 has no vllm.v1.spec_decode.ngram_proposer,
# and an import error there would stop the whole suite's collection.
skip_module_unless_line("0.20")

from vllm.config import SpeculativeConfig  # noqa: E402
from vllm.v1.spec_decode.ngram_proposer import (  # noqa: E402
    _find_longest_matched_ngram_and_propose_tokens as cpu_propose,
)
from vllm.v1.worker.gpu.input_batch import InputBatch, InputBuffers  # noqa: E402

from vllm_sampling_plugin.integration.speculator.ngram_proposer_0_20 import NgramProposerGPU  # noqa: E402

MAX_NUM_REQS, MAX_MODEL_LEN, K = 8, 32, 3


def make_config(min_n=2, max_n=3, k=K, real=True):
    if real:
        spec = SpeculativeConfig(
            method="ngram",
            num_speculative_tokens=k,
            prompt_lookup_min=min_n,
            prompt_lookup_max=max_n,
        )
    else:  # SpeculativeConfig refuses bad values itself; test ours with a stand-in.
        spec = SimpleNamespace(
            prompt_lookup_min=min_n, prompt_lookup_max=max_n, num_speculative_tokens=k
        )
    return SimpleNamespace(
        speculative_config=spec,
        scheduler_config=SimpleNamespace(max_num_seqs=MAX_NUM_REQS),
        model_config=SimpleNamespace(max_model_len=MAX_MODEL_LEN),
    )


class FakeRequestState:
    """The RequestState fields the speculator reads, as plain tensors."""

    def __init__(self, device, tokens, lens, last_sampled):
        self.max_model_len = MAX_MODEL_LEN
        self.all_token_ids = SimpleNamespace(
            gpu=torch.as_tensor(tokens, dtype=torch.int32, device=device)
        )
        self.total_len = SimpleNamespace(
            gpu=torch.as_tensor(lens, dtype=torch.int32, device=device)
        )
        self.last_sampled_tokens = torch.as_tensor(
            last_sampled, dtype=torch.int64, device=device
        )
        self.num_reqs = len(lens)


def random_state(device, seed=0):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, 3, (MAX_NUM_REQS, MAX_MODEL_LEN)).astype(np.int32)
    lens = rng.integers(0, MAX_MODEL_LEN + 1, MAX_NUM_REQS).astype(np.int32)
    lens[:3] = [MAX_MODEL_LEN - 1, MAX_MODEL_LEN, 1]
    last_sampled = rng.integers(100, 200, (MAX_NUM_REQS, 1))
    return tokens, lens, last_sampled


def batch(device, idx_mapping):
    return SimpleNamespace(
        num_reqs=len(idx_mapping),
        idx_mapping=torch.tensor(idx_mapping, dtype=torch.int32, device=device),
    )


def expected_drafts(
    tokens, lens, last_sampled, idx_mapping, num_sampled, min_n=2, max_n=3, k=K
):
    rows = []
    for i, r in enumerate(idx_mapping):
        draft = cpu_propose(
            tokens[r, : lens[r]], min_n, max_n, MAX_MODEL_LEN, k
        ).tolist()
        if num_sampled[i] == 0:
            draft = []
        rows.append(draft + [int(last_sampled[r, 0])] * (k - len(draft)))
    return rows


def test_contract_attributes_and_config(device):
    spec = NgramProposerGPU(make_config(min_n=2, max_n=4, k=5), device)
    assert (spec.min_n, spec.max_n, spec.k) == (2, 4, 5)
    assert spec.model is None
    assert spec.supports_mm_inputs is False
    assert spec.draft_logits is None
    spec.load_model(torch.nn.Linear(2, 2))
    spec.init_cudagraph_manager(None)
    spec.set_attn(object(), object(), object())
    spec.capture_model()
    assert spec.model is None


@pytest.mark.parametrize(
    "min_n, max_n, k, field",
    [
        (0, 3, 3, "prompt_lookup_min"),
        (4, 3, 3, "prompt_lookup_max"),
        (2, 257, 3, "prompt_lookup_max"),
        (2, 3, 0, "num_speculative_tokens"),
        (None, 3, 3, "prompt_lookup_min"),
    ],
)
def test_bad_config_names_the_field(device, min_n, max_n, k, field):
    with pytest.raises(ValueError, match=field):
        NgramProposerGPU(make_config(min_n, max_n, k, real=False), device)


def test_no_speculative_config(device):
    config = make_config()
    config.speculative_config = None
    with pytest.raises(ValueError, match="speculative_config"):
        NgramProposerGPU(config, device)


def test_keyword_and_positional_forms(device):
    tokens, lens, last_sampled = random_state(device)
    idx_mapping = [5, 0, 2, 1, 7, 3]
    num_sampled_np = [1, 2, 1, 1, 0, 3]
    expected = expected_drafts(tokens, lens, last_sampled, idx_mapping, num_sampled_np)
    expected_counts = [
        len(cpu_propose(tokens[r, : lens[r]], 2, 3, MAX_MODEL_LEN, K))
        if num_sampled_np[i] > 0
        else 0
        for i, r in enumerate(idx_mapping)
    ]
    assert 0 < sum(expected_counts), "the data must hold some real proposals"

    spec = NgramProposerGPU(make_config(), device)
    req_states = FakeRequestState(device, tokens, lens, last_sampled)
    spec.bind(req_states)
    input_batch = batch(device, idx_mapping)
    num_sampled = torch.tensor(num_sampled_np, dtype=torch.int32, device=device)
    num_rejected = torch.zeros_like(num_sampled)
    temperature = torch.zeros(MAX_NUM_REQS, device=device)
    seeds = torch.zeros(MAX_NUM_REQS, dtype=torch.int64, device=device)
    next_prefill = torch.zeros(MAX_NUM_REQS, dtype=torch.int32, device=device)

    # model_runner.sample_tokens: 11 positional arguments plus mm_inputs=.
    positional = spec.propose(
        input_batch,
        None,
        {},
        torch.zeros(10, 4),
        None,
        num_sampled,
        num_rejected,
        req_states.last_sampled_tokens,
        next_prefill,
        temperature,
        seeds,
        mm_inputs=None,
    )
    assert positional.shape == (len(idx_mapping), K) and positional.dtype == torch.int64
    assert positional.tolist() == expected
    positional = positional.clone()

    spec.drafts.fill_(-1)
    keyword = spec.propose(
        input_batch=input_batch,
        attn_metadata=None,
        slot_mappings={},
        last_hidden_states=torch.zeros(10, 4),
        aux_hidden_states=None,
        num_sampled=num_sampled,
        num_rejected=num_rejected,
        last_sampled=req_states.last_sampled_tokens,
        next_prefill_tokens=next_prefill,
        temperature=temperature,
        seeds=seeds,
        dummy_run=False,
        skip_attn_for_dummy_run=False,
        mm_inputs=None,
        is_profile=False,
        some_future_kwarg=1,
    )
    assert torch.equal(keyword, positional)
    assert spec.num_drafts[: len(idx_mapping)].tolist() == expected_counts


def test_dummy_run_returns_buffer_without_reading_history(device):
    spec = NgramProposerGPU(make_config(), device)
    spec.drafts.fill_(7)
    buffers = InputBuffers(max_num_reqs=MAX_NUM_REQS, max_num_tokens=64, device=device)
    input_batch = InputBatch.make_dummy(5, 64, buffers)
    # Not bound: a dummy run must not need (or touch) the request state.
    out = spec.propose(
        input_batch=input_batch,
        attn_metadata=None,
        slot_mappings=None,
        last_hidden_states=torch.zeros(64, 4),
        aux_hidden_states=None,
        num_sampled=torch.ones(5, dtype=torch.int32, device=device),
        num_rejected=torch.zeros(5, dtype=torch.int32, device=device),
        last_sampled=torch.zeros(MAX_NUM_REQS, 1, dtype=torch.int64, device=device),
        next_prefill_tokens=torch.zeros(MAX_NUM_REQS, dtype=torch.int32, device=device),
        temperature=torch.zeros(MAX_NUM_REQS, device=device),
        seeds=torch.zeros(MAX_NUM_REQS, dtype=torch.int64, device=device),
        dummy_run=True,
        skip_attn_for_dummy_run=True,
        mm_inputs=None,
        is_profile=True,
    )
    assert out.shape == (5, K) and out.dtype == torch.int64
    assert out.data_ptr() == spec.drafts.data_ptr()
    assert (spec.drafts == 7).all()


def test_step_planned_without_proposal_launches_nothing(device, monkeypatch):
    import vllm_sampling_plugin.integration.speculator.ngram_proposer_0_20 as module

    def no_launch(*args, **kwargs):
        raise AssertionError("a step planned without proposal launched the proposer")

    monkeypatch.setattr(module, "ngram_propose_into", no_launch)
    spec = NgramProposerGPU(make_config(), device)
    spec.drafts.fill_(7)
    spec.propose_this_step = False
    # Not bound either: the plan alone decides.
    out = spec.propose(batch(device, [0, 1]), num_sampled=torch.ones(2, dtype=torch.int32, device=device))
    assert out.data_ptr() == spec.drafts.data_ptr() and out.shape == (2, K)
    assert (out == 7).all()


def test_fresh_buffer_holds_valid_ids(device):
    spec = NgramProposerGPU(make_config(), device)
    assert (spec.drafts == 0).all()


def test_real_step_requires_bind(device):
    spec = NgramProposerGPU(make_config(), device)
    with pytest.raises(RuntimeError, match="bind"):
        spec.propose(
            batch(device, [0]),
            num_sampled=torch.ones(1, dtype=torch.int32, device=device),
        )


def test_max_model_len_is_read_every_step(device):
    tokens = np.tile(
        np.array([4, 9], dtype=np.int32), (MAX_NUM_REQS, MAX_MODEL_LEN // 2)
    )
    lens = np.full(MAX_NUM_REQS, 20, dtype=np.int32)
    last_sampled = np.full((MAX_NUM_REQS, 1), 55)
    spec = NgramProposerGPU(make_config(), device)
    req_states = FakeRequestState(device, tokens, lens, last_sampled)
    spec.bind(req_states)
    ones = torch.ones(1, dtype=torch.int32, device=device)
    assert spec.propose(batch(device, [0]), num_sampled=ones).tolist() == [[4, 9, 4]]
    req_states.max_model_len = 22  # GPUModelRunner.update_max_model_len
    assert spec.propose(batch(device, [0]), num_sampled=ones).tolist() == [[4, 9, 55]]
    req_states.max_model_len = 20
    assert spec.propose(batch(device, [0]), num_sampled=ones).tolist() == [[55, 55, 55]]


def test_only_the_first_steps_inputs_are_checked(device, monkeypatch):
    from vllm_sampling_plugin.ops.ngram import launcher

    launched = []
    monkeypatch.setattr(launcher, "_launch", lambda *args: launched.append(args))
    tokens = np.zeros((MAX_NUM_REQS, MAX_MODEL_LEN), dtype=np.int32)
    lens = np.full(MAX_NUM_REQS, 20, dtype=np.int32)
    spec = NgramProposerGPU(make_config(), device)
    spec.bind(FakeRequestState(device, tokens, lens, np.zeros((MAX_NUM_REQS, 1))))
    wrong = torch.ones(1, dtype=torch.float32, device=device)  # num_sampled must be int
    with pytest.raises(ValueError, match="num_sampled"):
        spec.propose(batch(device, [0]), num_sampled=wrong)
    ones = torch.ones(1, dtype=torch.int32, device=device)
    spec.propose(batch(device, [0]), num_sampled=ones)
    assert spec.step_inputs_checked
    # Later steps skip the checks: the same wrong input now reaches the launch.
    spec.propose(batch(device, [0]), num_sampled=wrong)
    assert launched[-1][3] is wrong
    # The warm-up's and other callers' draws keep them.
    with pytest.raises(ValueError, match="num_sampled"):
        spec.draft(batch(device, [0]).idx_mapping, wrong, spec.req_states.last_sampled_tokens)


class FakeStagedWriteTensor:
    def __init__(
        self, size, dtype, device, max_concurrency=2, uva_instead_of_gpu=False
    ):
        self.gpu = torch.zeros(size, dtype=dtype)
        self.dtype, self.device, self.max_concurrency = dtype, device, max_concurrency
        self.uva_instead_of_gpu = uva_instead_of_gpu
        self._staged_write_indices = []
        if uva_instead_of_gpu:
            self._uva_buf = object()


def test_bind_moves_uva_history_to_device(monkeypatch):
    monkeypatch.setattr(
        "vllm.v1.worker.gpu.buffer_utils.StagedWriteTensor", FakeStagedWriteTensor
    )
    uva = FakeStagedWriteTensor(
        (MAX_NUM_REQS, MAX_MODEL_LEN), torch.int32, "cuda:3", 3, True
    )
    req_states = SimpleNamespace(all_token_ids=uva, num_reqs=0)
    NgramProposerGPU(make_config(), "cpu").bind(req_states)
    swapped = req_states.all_token_ids
    assert swapped is not uva and isinstance(swapped, FakeStagedWriteTensor)
    assert not swapped.uva_instead_of_gpu
    assert (
        swapped.gpu.shape == (MAX_NUM_REQS, MAX_MODEL_LEN)
        and swapped.dtype == torch.int32
    )
    assert (swapped.device, swapped.max_concurrency) == ("cuda:3", 3)

    # Already device-resident: left alone.
    NgramProposerGPU(make_config(), "cpu").bind(req_states)
    assert req_states.all_token_ids is swapped


@pytest.mark.parametrize("num_reqs, staged", [(1, []), (0, [3])])
def test_bind_refuses_once_requests_exist(num_reqs, staged):
    uva = FakeStagedWriteTensor(
        (MAX_NUM_REQS, MAX_MODEL_LEN), torch.int32, "cpu", 2, True
    )
    uva._staged_write_indices = staged
    req_states = SimpleNamespace(all_token_ids=uva, num_reqs=num_reqs)
    with pytest.raises(RuntimeError, match="before any request"):
        NgramProposerGPU(make_config(), "cpu").bind(req_states)
    assert req_states.all_token_ids is uva


@pytest.mark.gpu
def test_real_request_state_no_host_sync_gpu():
    from vllm.v1.worker.gpu.states import RequestState

    device = torch.device("cuda")
    max_num_reqs, max_model_len = 16, 2048
    config = make_config()
    config.scheduler_config.max_num_seqs = max_num_reqs
    req_states = RequestState(max_num_reqs, max_model_len, 4096, K, 32000, device)
    spec = NgramProposerGPU(config, device)
    before = torch.cuda.memory_allocated()
    spec.bind(req_states)
    assert torch.cuda.memory_allocated() - before >= max_num_reqs * max_model_len * 4
    assert not hasattr(req_states.all_token_ids, "_uva_buf")

    rng = np.random.default_rng(0)
    prompts = {}
    for i in range(10):
        length = int(rng.integers(1, max_model_len))
        prompts[f"r{i}"] = rng.integers(0, 4, length).tolist()
        req_states.add_request(f"r{i}", length, prompts[f"r{i}"], 0)
    req_states.apply_staged_writes()
    req_states.last_sampled_tokens.copy_(
        torch.arange(max_num_reqs, device=device).unsqueeze(1) + 500
    )

    ids = [f"r{i}" for i in (3, 0, 9, 4, 7)]
    idx_np = np.array([req_states.req_id_to_index[r] for r in ids], dtype=np.int32)
    input_batch = SimpleNamespace(
        num_reqs=len(ids), idx_mapping=torch.from_numpy(idx_np).to(device)
    )
    num_sampled = torch.ones(len(ids), dtype=torch.int32, device=device)
    args = (
        input_batch,
        None,
        {},
        None,
        None,
        num_sampled,
        torch.zeros_like(num_sampled),
        req_states.last_sampled_tokens,
        req_states.next_prefill_tokens,
        None,
        None,
    )
    spec.propose(*args)  # compile outside the check
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        drafts = spec.propose(*args)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    got = drafts.cpu().tolist()
    for i, r in enumerate(ids):
        tokens = np.array(prompts[r], dtype=np.int32)
        expected = cpu_propose(tokens, 2, 3, max_model_len, K).tolist()
        fill = 500 + int(idx_np[i])
        assert got[i] == expected + [fill] * (K - len(expected)), r
