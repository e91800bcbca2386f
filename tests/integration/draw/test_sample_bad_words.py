"""Bad words under speculation: each logit sees the drafts before it.

A request with output ``..., a`` and drafts ``b, c`` is verified at three
logits: after ``a``, after ``a b`` and after ``a b c``. With the bad word
``b z``, token ``z`` is banned exactly at the logit after ``b`` (local
position 1), as a step without drafts would ban it after sampling ``b``.
vLLM 0.20's kernel reads the drafts one position early
(``spec_bad_words.py``); the plugin's state must not.
"""

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from tests.conftest import DEVICE
from tests.vllm_lines import skip_module_unless_line

skip_module_unless_line("0.20")

from vllm.sampling_params import SamplingParams

from vllm_sampling_plugin.integration.draw.sample_bad_words import DraftAlignedBadWordsState

VOCAB = 64
PROMPT = [3, 4, 5]
A, B, C, Z = 10, 11, 12, 40


def _state_with_output(bad_words: list[list[int]]) -> DraftAlignedBadWordsState:
    device = DEVICE
    all_token_ids = torch.zeros(1, 32, dtype=torch.int32, device=device)
    tokens = PROMPT + [A]
    all_token_ids[0, : len(tokens)] = torch.tensor(tokens)
    req_states = SimpleNamespace(
        max_num_reqs=1,
        device=device,
        all_token_ids=SimpleNamespace(gpu=all_token_ids),
        prompt_len=SimpleNamespace(gpu=torch.tensor([len(PROMPT)], device=device)),
        total_len=SimpleNamespace(gpu=torch.tensor([len(tokens)], device=device)),
    )
    state = DraftAlignedBadWordsState(req_states)
    params = SamplingParams()
    params._bad_words_token_ids = bad_words
    state.add_request(0, params)
    state.apply_staged_writes()
    return state


def _banned(state, input_ids: list[int]) -> list[list[int]]:
    device = DEVICE
    num_logits = len(input_ids)
    logits = torch.zeros(num_logits, VOCAB, device=device)
    state.apply_bad_words(
        logits,
        torch.zeros(num_logits, dtype=torch.int32, device=device),
        np.zeros(1, dtype=np.int32),
        torch.tensor(input_ids, dtype=torch.int32, device=device),  # as the runner's input_ids
        torch.arange(num_logits, dtype=torch.int32, device=device),
    )
    return [row.isinf().nonzero().flatten().tolist() for row in logits.cpu()]


@pytest.mark.gpu
def test_two_token_bad_word_is_banned_right_after_its_prefix_draft():
    state = _state_with_output([[B, Z]])
    # Local position 0 holds the last sampled token, drafts follow.
    assert _banned(state, [A, B, C]) == [[], [Z], []]


@pytest.mark.gpu
def test_bad_word_ending_in_the_last_output_token_and_a_draft():
    state = _state_with_output([[A, B, Z]])
    assert _banned(state, [A, B, C]) == [[], [Z], []]
    # Without the draft ``b`` nothing matches.
    assert _banned(state, [A, C, B]) == [[], [], []]


@pytest.mark.gpu
def test_single_token_bad_word_is_banned_at_every_logit():
    state = _state_with_output([[Z]])
    assert _banned(state, [A, B, C]) == [[Z], [Z], [Z]]


@pytest.mark.gpu
def test_without_drafts_the_output_decides():
    state = _state_with_output([[A, Z], [B, Z]])
    assert _banned(state, [A]) == [[Z]]
