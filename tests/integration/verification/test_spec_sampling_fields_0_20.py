"""Which sampling fields a request may combine with speculative decoding.

``SamplingParams.verify`` is what the front-end runs on every request; a
``ValueError`` from it becomes an HTTP 400 (``create_error_response``). The
model config is a stand-in with the three things ``verify`` reads.
"""

from http import HTTPStatus
from types import SimpleNamespace

import pytest

from tests.vllm_lines import skip_module_unless_line

skip_module_unless_line("0.20")  # the 0.20 line's request checks

from vllm.entrypoints.utils import create_error_response
from vllm.sampling_params import SamplingParams

from tests.integration.helpers import run_python
from vllm_sampling_plugin.integration.verification import spec_sampling_fields_0_20 as spec_sampling_fields

VOCAB = 1000
MODEL_CONFIG = SimpleNamespace(
    max_logprobs=20, get_vocab_size=lambda: VOCAB, logits_processors=None
)
NGRAM = SimpleNamespace(method="ngram", num_speculative_tokens=3)

# Every sampling field the V2 Sampler applies per logit, with a value that
# turns it on.
EVERY_FIELD = dict(
    temperature=0.7,
    top_k=20,
    top_p=0.9,
    min_p=0.1,
    logit_bias={5: 2.0, 17: -100.0},
    presence_penalty=0.5,
    frequency_penalty=0.3,
    repetition_penalty=1.2,
    bad_words=["never"],
    allowed_token_ids=list(range(100)),
    min_tokens=4,
    logprobs=5,
    prompt_logprobs=3,
    seed=11,
)


@pytest.fixture
def patched(monkeypatch):
    monkeypatch.setattr(
        SamplingParams,
        "_validate_spec_decode",
        spec_sampling_fields._lifting_min_p_and_logit_bias(SamplingParams._validate_spec_decode),
    )


def verify(params: SamplingParams, speculative_config) -> None:
    params.verify(MODEL_CONFIG, speculative_config, None, None)


@pytest.mark.parametrize("field", ["min_p", "logit_bias", "every_field"])
def test_v2_runner_accepts_the_fields_with_speculation(patched, monkeypatch, field):
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "1")
    kwargs = EVERY_FIELD if field == "every_field" else {field: EVERY_FIELD[field]}
    params = SamplingParams(**kwargs)
    verify(params, NGRAM)
    # The request keeps its values: only vLLM's check saw them hidden.
    assert params.min_p == kwargs.get("min_p", 0.0)
    assert params.logit_bias == kwargs.get("logit_bias")


def test_the_lift_is_logged_once_per_process(patched, monkeypatch, plugin_records):
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "1")
    verify(SamplingParams(temperature=0.0), NGRAM)
    assert plugin_records == []
    for field in ("min_p", "logit_bias", "min_p"):
        verify(SamplingParams(**{field: EVERY_FIELD[field]}), NGRAM)
    assert [r.getMessage() for r in plugin_records] == [
        "vllm-sampling-plugin: min_p and logit_bias are accepted with speculative decoding; "
        "the plugin's rejection sampler applies them to the target distribution."
    ]


@pytest.mark.parametrize("field", ["min_p", "logit_bias"])
def test_v1_runner_keeps_the_refusal_as_a_400_naming_the_field(patched, monkeypatch, field):
    monkeypatch.delenv("VLLM_USE_V2_MODEL_RUNNER", raising=False)
    with pytest.raises(ValueError, match="not yet supported with speculative decoding") as info:
        verify(SamplingParams(**{field: EVERY_FIELD[field]}), NGRAM)
    assert field in str(info.value)
    assert create_error_response(info.value).error.code == HTTPStatus.BAD_REQUEST


def test_without_speculation_every_field_is_accepted(patched, monkeypatch):
    monkeypatch.delenv("VLLM_USE_V2_MODEL_RUNNER", raising=False)
    verify(SamplingParams(**EVERY_FIELD), None)


def test_other_checks_still_refuse_with_the_field_named(patched, monkeypatch):
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "1")
    with pytest.raises(ValueError, match="out-of-vocab") as info:
        verify(SamplingParams(logit_bias={VOCAB + 3: 1.0}), NGRAM)
    response = create_error_response(info.value)
    assert response.error.code == HTTPStatus.BAD_REQUEST
    assert response.error.param == "logit_bias"
    with pytest.raises(ValueError) as info:
        verify(SamplingParams(logprobs=MODEL_CONFIG.max_logprobs + 1), NGRAM)
    assert create_error_response(info.value).error.param == "logprobs"


def test_register_installs_the_lift_once():
    out = run_python(
        """
        from vllm.plugins import load_general_plugins
        from vllm.sampling_params import SamplingParams
        load_general_plugins()
        patched = SamplingParams._validate_spec_decode
        from vllm_sampling_plugin.integration.verification.spec_sampling_fields_0_20 import (
            patch_spec_decode_validation,
        )
        patch_spec_decode_validation()
        assert SamplingParams._validate_spec_decode is patched
        print(getattr(patched, "_vllm_sampling_plugin_patched", False))
        """
    )
    assert out.strip().splitlines()[-1] == "True"
