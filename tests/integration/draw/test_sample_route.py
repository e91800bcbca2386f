"""Which kernel PluginSampler picks for a batch (host-side decision).

vLLM's UVA-backed state needs pinned memory (a GPU), so the state arrays are
plain numpy here; the decision only ever reads their ``.np`` views.
"""

from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("vllm")

from vllm_sampling_plugin.integration.draw.sample import (  # noqa: E402
    PluginSampler,
    PluginSamplingStates,
    Route,
)
from tests.vllm_lines import needs_seam  # noqa: E402
from vllm_sampling_plugin.integration.common import shapes  # noqa: E402

pytestmark = needs_seam(shapes.DRAW, shapes.SAMPLE)

VOCAB = 100


def make_sampler(use_flashinfer=True, logprobs_mode="raw_logprobs", **rows):
    n = 4
    states = object.__new__(PluginSamplingStates)
    states.vocab_size = VOCAB
    states.top_k = SimpleNamespace(np=np.array(rows.get("top_k", [VOCAB] * n), np.int32))
    states.top_p = SimpleNamespace(np=np.array(rows.get("top_p", [1.0] * n), np.float32))
    states.temperature = SimpleNamespace(np=np.array(rows.get("temperature", [1.0] * n), np.float32))
    states.has_explicit_seed = np.array(rows.get("seeded", [False] * n))
    states.num_logprobs = np.array(rows.get("logprobs", [-1] * n), np.int32)
    sampler = object.__new__(PluginSampler)
    sampler.sampling_states = states
    sampler.use_flashinfer = use_flashinfer
    sampler.logprobs_mode = logprobs_mode
    return sampler


BATCH = np.array([0, 1, 2, 3])


def test_no_top_k_top_p_uses_gumbel():
    assert make_sampler().route(BATCH) is Route.GUMBEL


@pytest.mark.parametrize("rows", [{"top_k": [VOCAB, 50, VOCAB, VOCAB]},
                                  {"top_p": [1.0, 1.0, 0.9, 1.0]}])
def test_top_k_or_top_p_goes_to_flashinfer_when_selected(rows):
    assert make_sampler(**rows).route(BATCH) is Route.FLASHINFER
    assert make_sampler(use_flashinfer=False, **rows).route(BATCH) is Route.FUSED_TOP_K_TOP_P


@pytest.mark.parametrize("blocker", [{"temperature": [1.0, 0.0, 1.0, 1.0]},
                                     {"seeded": [False, False, False, True]}])
def test_greedy_or_seeded_rows_keep_the_batch_off_flashinfer(blocker):
    sampler = make_sampler(top_k=[50] * 4, **blocker)
    assert sampler.route(BATCH) is Route.FUSED_TOP_K_TOP_P


def test_processed_logprobs_need_the_masked_logits():
    sampler = make_sampler(top_k=[50] * 4, logprobs=[-1, 5, -1, -1],
                           logprobs_mode="processed_logprobs")
    assert sampler.route(BATCH) is Route.MASKED_TOP_K_TOP_P
    raw = make_sampler(top_k=[50] * 4, logprobs=[-1, 5, -1, -1])
    assert raw.route(BATCH) is Route.FLASHINFER


def test_only_rows_in_the_batch_count():
    sampler = make_sampler(top_k=[50, VOCAB, VOCAB, VOCAB], seeded=[True, False, False, False])
    assert sampler.route(np.array([1, 2])) is Route.GUMBEL
    assert sampler.route(np.array([0, 2])) is Route.FUSED_TOP_K_TOP_P
