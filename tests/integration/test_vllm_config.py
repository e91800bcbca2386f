"""The V2 runner's config checks accept n-gram speculation with the plugin."""

from tests.integration.helpers import run_python
from tests.vllm_lines import needs_vllm_line

pytestmark = needs_vllm_line("0.20")


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


def test_one_warning_when_verification_steps_outgrow_the_graphs():
    out = run_python(
        """
        import logging
        from types import SimpleNamespace
        from vllm.config import CUDAGraphMode
        from vllm_sampling_plugin.integration import vllm_config as vc

        records = []
        handler = logging.Handler()
        handler.emit = records.append
        vc.logger.addHandler(handler)

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
        assert len(records) == 1
        print(records[0].levelname, records[0].getMessage())
        """,
        env={"VLLM_LOGGING_LEVEL": "WARNING"},
    )
    last = out.strip().splitlines()[-1]
    assert last.startswith("WARNING"), last
    assert "reach 1024 tokens" in last and "captured up to 512" in last
    assert "--max-cudagraph-capture-size 1024" in last
