"""PluginSampler checks the Gumbel kernel's inputs on the first step that
draws with it and skips the checks on later steps."""

from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("vllm")

from tests.vllm_lines import skip_module_unless_line  # noqa: E402

skip_module_unless_line("0.20")  # the 0.20 line's PluginSampler

from vllm_sampling_plugin.integration.draw import sample as sampler_module  # noqa: E402
from vllm_sampling_plugin.integration.draw.sample import PluginSampler, Route  # noqa: E402


@pytest.fixture
def sampler(monkeypatch):
    calls = []
    monkeypatch.setattr(sampler_module, "gumbel_sample",
                        lambda *args, check_inputs, **kwargs: calls.append(("gumbel", check_inputs)))
    monkeypatch.setattr(sampler_module, "top_k_top_p_sample",
                        lambda *args, **kwargs: calls.append(("fused", "check_inputs" in kwargs)))
    sampler = object.__new__(PluginSampler)
    sampler.gumbel_inputs_checked = False
    sampler.use_fp64_gumbel = False
    gpu = SimpleNamespace(gpu=torch.zeros(4))
    sampler.sampling_states = SimpleNamespace(temperature=gpu, seeds=gpu, top_k=gpu, top_p=gpu)
    monkeypatch.setattr(PluginSampler, "apply_sampling_params",
                        lambda self, logits, *args, **kwargs: logits)
    sampler.calls = calls
    return sampler


def step(sampler, route):
    sampler.route = lambda idx_mapping_np: route
    sampler.sample(torch.zeros(2, 8), torch.zeros(2, dtype=torch.int32), None,
                   torch.zeros(2, dtype=torch.int64), None, None)


def test_gumbel_inputs_are_checked_on_the_first_gumbel_step_only(sampler):
    step(sampler, Route.FUSED_TOP_K_TOP_P)
    step(sampler, Route.GUMBEL)
    step(sampler, Route.GUMBEL)
    step(sampler, Route.MASKED_TOP_K_TOP_P)
    assert sampler.calls == [("fused", False), ("gumbel", True), ("gumbel", False),
                             ("gumbel", False)]


def test_the_warm_up_and_other_callers_of_draw_keep_the_checks(sampler):
    step(sampler, Route.GUMBEL)
    sampler.draw(Route.GUMBEL, torch.zeros(2, 8), torch.zeros(2, dtype=torch.int32),
                 torch.zeros(2, dtype=torch.int64))
    assert sampler.calls == [("gumbel", True), ("gumbel", True)]
