"""Requests over the V2 runner's per-request tables get a 400 naming the field.

Without the check such a request raises in the worker and stops the engine.
"""

from http import HTTPStatus
from types import SimpleNamespace

import pytest

from tests.vllm_lines import skip_module_unless_line

skip_module_unless_line("0.20")  # the 0.20 line's request checks

from vllm.entrypoints.utils import create_error_response
from vllm.sampling_params import SamplingParams
from vllm.v1.worker.gpu.sample import bad_words, logit_bias

from vllm_sampling_plugin.integration.draw import sample_request_limits as request_limits

VOCAB = 5000
MODEL_CONFIG = SimpleNamespace(
    max_logprobs=20, get_vocab_size=lambda: VOCAB, logits_processors=None
)


class OneTokenPerCharacter:
    max_token_id = VOCAB - 1

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [ord(c) % VOCAB for c in text]


@pytest.fixture
def patched(monkeypatch):
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "1")
    for name, check in (
        ("verify", request_limits._check_requested_limits),
        ("update_from_generation_config", request_limits._check_stop_token_limit),
        ("update_from_tokenizer", request_limits._check_bad_words_limits),
    ):
        monkeypatch.setattr(SamplingParams, name,
                            request_limits._then(getattr(SamplingParams, name), check))


def front_end(params: SamplingParams, stop_ids=()) -> None:
    """What the input processor runs on a request, in its order."""
    params.verify(MODEL_CONFIG, None, None, None)
    params.update_from_generation_config({"eos_token_id": list(stop_ids)}, eos_token_id=2)
    params.update_from_tokenizer(OneTokenPerCharacter())


def assert_400_naming(field: str, params: SamplingParams, stop_ids=()) -> None:
    with pytest.raises(ValueError) as info:
        front_end(params, stop_ids)
    response = create_error_response(info.value)
    assert response.error.code == HTTPStatus.BAD_REQUEST
    assert response.error.param == field


def test_at_the_limits_requests_pass(patched):
    front_end(SamplingParams(
        allowed_token_ids=list(range(logit_bias.MAX_NUM_ALLOWED_TOKEN_IDS)),
        logit_bias={i: 1.0 for i in range(logit_bias.MAX_NUM_LOGIT_BIAS_TOKENS)},
        min_tokens=3,
        # This tokenizer's prefix-space variant is one token longer, which
        # vLLM does not add: one entry per word.
        bad_words=[f"w{i}" for i in range(bad_words.MAX_NUM_BAD_WORDS)],
    ), stop_ids=range(100, 100 + logit_bias.MAX_NUM_STOP_TOKEN_IDS - 1))


def test_too_many_allowed_token_ids(patched):
    assert_400_naming("allowed_token_ids", SamplingParams(
        allowed_token_ids=list(range(logit_bias.MAX_NUM_ALLOWED_TOKEN_IDS + 1))))


def test_too_many_logit_bias_entries(patched):
    assert_400_naming("logit_bias", SamplingParams(
        logit_bias={i: 1.0 for i in range(logit_bias.MAX_NUM_LOGIT_BIAS_TOKENS + 1)}))


def test_too_many_stop_tokens_only_matter_with_min_tokens(patched):
    stop_ids = range(100, 100 + logit_bias.MAX_NUM_STOP_TOKEN_IDS + 1)
    front_end(SamplingParams(), stop_ids=stop_ids)
    assert_400_naming("stop_token_ids", SamplingParams(min_tokens=1), stop_ids=stop_ids)


def test_too_many_bad_words_or_bad_word_tokens(patched):
    assert_400_naming("bad_words", SamplingParams(
        bad_words=[f"w{i}" for i in range(bad_words.MAX_NUM_BAD_WORDS + 1)]))
    assert_400_naming("bad_words", SamplingParams(
        bad_words=["x" * (bad_words.MAX_BAD_WORDS_TOTAL_TOKENS + 1)]))


def test_v1_runner_is_left_alone(patched, monkeypatch):
    monkeypatch.delenv("VLLM_USE_V2_MODEL_RUNNER")
    front_end(SamplingParams(
        logit_bias={i: 1.0 for i in range(logit_bias.MAX_NUM_LOGIT_BIAS_TOKENS + 1)}))
