"""Resolution of the plugin's settings (no vLLM needed)."""

from types import SimpleNamespace

import pytest

from vllm_sampling_plugin import config


@pytest.mark.parametrize(
    "environ, expected",
    [({}, None), ({"VLLM_USE_FLASHINFER_SAMPLER": "1"}, True), ({"VLLM_USE_FLASHINFER_SAMPLER": " 0 "}, False)],
)
def test_flashinfer_env_tri_state(environ, expected):
    assert config.parse_flashinfer_env(environ) is expected


# Empty fails too: vLLM's own reading of the variable, int(""), does.
@pytest.mark.parametrize("bad", ["yes", "2", "-1", "on", "1.0", "", " "])
def test_flashinfer_env_malformed(bad):
    with pytest.raises(ValueError, match="VLLM_USE_FLASHINFER_SAMPLER"):
        config.parse_flashinfer_env({"VLLM_USE_FLASHINFER_SAMPLER": bad})


def test_settings_default_when_model_config_lacks_them():
    assert config.settings_from_model_config(None) == config.PluginSettings(False, None)
    stored = SimpleNamespace(use_fp64_gumbel=True, flashinfer_sampler=False)
    assert config.settings_from_model_config(stored) == config.PluginSettings(True, False)
