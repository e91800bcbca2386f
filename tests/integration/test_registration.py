"""Entry-point discovery and what register() patches, in fresh processes."""

import pytest

from tests.integration.helpers import registered_as, run_python
from tests.vllm_lines import needs_vllm_line

pytestmark = needs_vllm_line("0.20")

CHECK_PATCHED = """
import vllm.v1.worker.gpu.model_runner as mr
from vllm_sampling_plugin.integration.verification.rejection_sampler_0_20 import PluginRejectionSampler
from vllm_sampling_plugin.integration.draw.sample import PluginSampler
from vllm_sampling_plugin.integration.speculator import init_speculator_0_20 as speculator
assert mr.Sampler is PluginSampler, mr.Sampler
assert mr.RejectionSampler is PluginRejectionSampler, mr.RejectionSampler
assert mr.init_speculator is speculator.init_speculator, mr.init_speculator
assert mr.GPUModelRunner._dummy_sampler_run.warms_up_plugin_kernels
"""


def test_entry_point_is_discovered_and_patches_runner_names():
    out = run_python(
        "from vllm.plugins import load_general_plugins\n"
        "load_general_plugins()\n"
        + CHECK_PATCHED
        + "from vllm_sampling_plugin.integration.register import registration_state\n"
        "print(registration_state())\n"
    )
    assert out.strip().splitlines()[-1] == "active"


def test_register_is_idempotent():
    out = run_python(
        """
        import vllm_sampling_plugin
        vllm_sampling_plugin.register()
        import vllm.v1.worker.gpu.model_runner as mr
        init_once = mr.GPUModelRunner.__init__
        vllm_sampling_plugin.register()
        from vllm.plugins import load_general_plugins
        load_general_plugins()
        assert mr.GPUModelRunner.__init__ is init_once
        # One wrapper around vLLM's own __init__, not two.
        assert not hasattr(init_once.__wrapped__, "__wrapped__")
        print("ok")
        """
    )
    assert out.strip().splitlines()[-1] == "ok"


def test_unsupported_vllm_leaves_vllm_untouched_and_logs_one_error():
    out = run_python(
        """
        import vllm_sampling_plugin
        vllm_sampling_plugin.register()

        import vllm.v1.worker.gpu.model_runner as mr
        from vllm.engine.arg_utils import EngineArgs
        from vllm.config import ModelConfig, VllmConfig
        from vllm.v1.worker.gpu.sample.sampler import Sampler
        assert mr.Sampler is Sampler
        assert mr.init_speculator.__module__ == "vllm.v1.worker.gpu.spec_decode"
        assert not hasattr(EngineArgs, "use_fp64_gumbel")
        assert not hasattr(ModelConfig, "use_fp64_gumbel")
        assert "_vllm_sampling_plugin_patched" not in VllmConfig.__dict__
        errors = [r for r in records if r.levelno >= logging.ERROR]
        assert len(errors) == 1, [r.getMessage() for r in records]
        msg = errors[0].getMessage()
        assert "0.19.1" in msg and ">=0.20.0" in msg, msg
        print("ok")
        """,
        prelude=registered_as("0.19.1"),
    )
    assert out.strip().splitlines()[-1] == "ok"


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_worker_processes_see_the_patches(method):
    """Fork children inherit the patches; spawn children load the entry point."""
    out = run_python(
        f"""
        import multiprocessing as mp
        from vllm.plugins import load_general_plugins
        from tests.integration.child_probe import report_runner_names

        load_general_plugins()
        ctx = mp.get_context("{method}")
        queue = ctx.Queue()
        proc = ctx.Process(target=report_runner_names, args=(queue,))
        proc.start()
        print(queue.get(timeout=300))
        proc.join()
        """,
        timeout=400,
    )
    assert out.strip().splitlines()[-1] == "PluginSampler PluginRejectionSampler"
