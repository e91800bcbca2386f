"""What each seam's adapter finds in the installed vLLM is that line's row of
LINE_SEAMS; register() applies exactly those seams (fresh processes)."""

from tests.integration.helpers import run_python
from tests.vllm_lines import INSTALLED_LINE
from vllm_sampling_plugin.integration.version import LINE_SEAMS


def test_adapters_find_the_shapes_of_the_table():
    out = run_python(
        """
        from vllm_sampling_plugin.integration.seams import detect_seams
        for seam, found in detect_seams().items():
            print(f"{seam}={found.shape}")
        """
    )
    detected = dict(line.split("=", 1) for line in out.strip().splitlines() if "=" in line)
    assert detected == {seam: str(shape) for seam, shape in LINE_SEAMS[INSTALLED_LINE].items()}


def test_register_binds_the_draw_seams_sampler():
    out = run_python(
        """
        from vllm.plugins import load_general_plugins
        load_general_plugins()
        import vllm.v1.worker.gpu.model_runner as mr
        from vllm_sampling_plugin.integration.register import registration_state
        from vllm_sampling_plugin.integration.seams import draw
        from vllm_sampling_plugin.integration.version import LINE_SEAMS, installed_vllm_version, release_line
        shape = LINE_SEAMS[release_line(installed_vllm_version())]["draw"]
        assert mr.Sampler is draw.sampler_class(shape), mr.Sampler
        assert mr.GPUModelRunner._dummy_sampler_run.warms_up_plugin_kernels
        print(registration_state())
        """
    )
    assert out.strip().splitlines()[-1] == "active"
