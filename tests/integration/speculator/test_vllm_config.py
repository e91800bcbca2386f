"""The V2 runner's config checks accept n-gram speculation with the plugin,
and schedule it asynchronously (0.20: the plugin's proposer; 0.32: upstream's
GPU proposer, which upstream's config schedules synchronously under
``"ngram"``; 0.33 does so itself)."""

import json

import pytest

from tests.integration.helpers import CPU_DEVICE_SHIM, run_python
from tests.tiny_model import write_tiny_llama
from tests.vllm_lines import INSTALLED_LINE, needs_vllm_line

ON_0_20 = needs_vllm_line("0.20")
WITH_UPSTREAM_NGRAM = needs_vllm_line("0.32", "0.33", "0.34", why="the V2 runner's own n-gram speculator")

# The async-scheduling decision of real engine configs, for "ngram" and
# "ngram_gpu", with the V2 runner and (VLLM_USE_V2_MODEL_RUNNER=0) without.
ASYNC_DECISIONS = """
import json, logging
from vllm.plugins import load_general_plugins
load_general_plugins()
from vllm.engine.arg_utils import EngineArgs
from vllm_sampling_plugin.integration.speculator import vllm_config as vc

lines = []
def scheduled_async(method):
    config = EngineArgs(
        model=MODEL, load_format="dummy", max_model_len=256, max_num_seqs=8,
        speculative_config={"method": method, "num_speculative_tokens": 3,
                            "prompt_lookup_min": 2, "prompt_lookup_max": 3},
    ).create_engine_config()
    return config.scheduler_config.async_scheduling

# Attached after the first config: building one reconfigures vLLM's loggers.
scheduled_async("ngram_gpu")
plugin_logger = logging.getLogger("vllm.vllm_sampling_plugin")
plugin_logger.addHandler(type("H", (logging.Handler,), {"emit": lambda self, r: lines.append(r.getMessage())})())
plugin_logger.setLevel(logging.INFO)
print(json.dumps({
    "ngram": scheduled_async("ngram"),
    "ngram_gpu": scheduled_async("ngram_gpu"),
    # A second config, as vLLM's engine core builds: the decision is not said again.
    "ngram_again": scheduled_async("ngram"),
    "upstream_check": vc.upstream_turns_async_off_for_ngram(),
    "log": [line for line in lines if "n-gram speculation runs on the GPU" in line],
}))
"""


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> str:
    return str(write_tiny_llama(tmp_path_factory.mktemp("tiny")))


def async_decisions(tiny_model: str, **env: str | None) -> dict:
    # CUDA_VISIBLE_DEVICES empty: the real Triton on a machine without a GPU,
    # which 0.32's V2 runner needs (test_decode_graphs.py).
    out = run_python(
        prelude=CPU_DEVICE_SHIM + f"MODEL = {tiny_model!r}\n",
        code=ASYNC_DECISIONS,
        env={"CUDA_VISIBLE_DEVICES": "", **env},
    )
    return json.loads(out.strip().splitlines()[-1])


@WITH_UPSTREAM_NGRAM
def test_ngram_on_the_v2_runner_is_scheduled_as_upstream_schedules_ngram_gpu(tiny_model):
    got = async_decisions(tiny_model, VLLM_USE_V2_MODEL_RUNNER=None)
    assert got["ngram"] is True and got["ngram_gpu"] is True and got["ngram_again"] is True, got
    # 0.32 has upstream's check, which the plugin lifts, saying so once per
    # process; 0.33 schedules "ngram" asynchronously itself, and the plugin stays out.
    assert got["upstream_check"] is (INSTALLED_LINE == "0.32"), got
    if INSTALLED_LINE == "0.32":
        assert got["log"] == [
            "vllm-sampling-plugin: n-gram speculation runs on the GPU (async scheduling "
            "on; 'ngram' is scheduled as upstream schedules 'ngram_gpu', the same proposer)."
        ], got["log"]
    else:
        assert got["log"] == [], got["log"]


@needs_vllm_line("0.32")
def test_without_the_plugin_0_32_schedules_ngram_synchronously(tiny_model):
    """Upstream's rule that the plugin lifts: without it "ngram" runs
    synchronously, "ngram_gpu" (the same speculator) asynchronously."""
    got = async_decisions(tiny_model, VLLM_PLUGINS="none")
    assert got["upstream_check"] is True
    assert got["ngram"] is False and got["ngram_gpu"] is True, got


@needs_vllm_line("0.32", "0.33", why="the V1 runner, which 0.34 removed")
def test_the_v1_runner_keeps_upstreams_decision(tiny_model):
    """The V1 runner's "ngram" proposer runs on the host: no async scheduling."""
    got = async_decisions(tiny_model, VLLM_USE_V2_MODEL_RUNNER="0")
    assert got["ngram"] is False, got
    assert got["log"] == [], got["log"]


@ON_0_20
def test_v2_validation_accepts_ngram_but_keeps_other_restrictions():
    out = run_python(
        """
        from types import SimpleNamespace
        from vllm.plugins import load_general_plugins
        load_general_plugins()
        from vllm.config import VllmConfig

        def fake(method, dbo=False):
            return SimpleNamespace(
                model_config=None,
                parallel_config=SimpleNamespace(prefill_context_parallel_size=1, enable_dbo=dbo),
                speculative_config=SimpleNamespace(method=method),
                cache_config=SimpleNamespace(kv_sharing_fast_prefill=False),
                ec_transfer_config=None,
            )

        for method in ("ngram", "ngram_gpu", "eagle"):
            cfg = fake(method)
            VllmConfig._validate_v2_model_runner(cfg)
            assert cfg.speculative_config.method == method
        for cfg, expected in ((fake("ngram", dbo=True), "dual batch overlap"),
                              (fake("medusa"), "speculative method 'medusa'")):
            try:
                VllmConfig._validate_v2_model_runner(cfg)
            except ValueError as e:
                assert expected in str(e), e
            else:
                raise AssertionError("expected a ValueError")
        print("ok")
        """,
        env={"VLLM_USE_V2_MODEL_RUNNER": "1"},
    )
    assert out.strip().splitlines()[-1] == "ok"


@ON_0_20
def test_without_v2_runner_the_checks_are_unchanged():
    out = run_python(
        """
        from types import SimpleNamespace
        from vllm.plugins import load_general_plugins
        load_general_plugins()
        from vllm.config import VllmConfig
        cfg = SimpleNamespace(
            model_config=None,
            parallel_config=SimpleNamespace(prefill_context_parallel_size=1, enable_dbo=False),
            speculative_config=SimpleNamespace(method="ngram"),
            cache_config=SimpleNamespace(kv_sharing_fast_prefill=False),
            ec_transfer_config=None,
        )
        try:
            VllmConfig._validate_v2_model_runner(cfg)
        except ValueError as e:
            print("refused:", e)
        """,
        env={"VLLM_USE_V2_MODEL_RUNNER": "0"},
    )
    # Without the V2 runner the plugin does not widen vLLM's checks.
    assert "speculative method 'ngram'" in out


@ON_0_20
def test_one_warning_when_verification_steps_outgrow_the_graphs():
    out = run_python(
        """
        import logging
        from types import SimpleNamespace
        from vllm.config import CUDAGraphMode
        from vllm_sampling_plugin.integration.speculator import vllm_config as vc

        records = []
        handler = logging.Handler()
        handler.emit = records.append
        logging.getLogger("vllm.vllm_sampling_plugin").addHandler(handler)

        def config(max_num_seqs, k, captured, eager=False, batched=8192,
                   mode=CUDAGraphMode.FULL_AND_PIECEWISE):
            return SimpleNamespace(
                model_config=SimpleNamespace(enforce_eager=eager),
                scheduler_config=SimpleNamespace(max_num_seqs=max_num_seqs,
                                                 max_num_batched_tokens=batched),
                speculative_config=SimpleNamespace(num_speculative_tokens=k),
                compilation_config=SimpleNamespace(max_cudagraph_capture_size=captured,
                                                   cudagraph_mode=mode),
            )

        assert vc.verification_step_tokens(config(256, 3, 512)) == 1024
        assert vc.verification_step_tokens(config(256, 3, 512, batched=768)) == 768
        for quiet in (config(128, 3, 512), config(256, 3, 1024), config(256, 3, 512, eager=True),
                      config(256, 3, 512, mode=CUDAGraphMode.NONE)):
            vc.warn_if_verification_outgrows_graphs(quiet)
        assert records == [], [r.getMessage() for r in records]
        vc.warn_if_verification_outgrows_graphs(config(256, 3, 512))
        vc.warn_if_verification_outgrows_graphs(config(256, 3, 512))  # the engine core's rebuild
        assert len(records) == 1
        print(records[0].levelname, records[0].getMessage())
        """,
        env={"VLLM_LOGGING_LEVEL": "WARNING"},
    )
    last = out.strip().splitlines()[-1]
    assert last.startswith("WARNING"), last
    assert "reach 1024 tokens" in last and "captured up to 512" in last
    assert "--max-cudagraph-capture-size 1024" in last
