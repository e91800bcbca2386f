"""The five FlashInfer selection cases, with the probe replaced."""

import logging

import pytest

from vllm_sampling_plugin.ops.topk_topp.flashinfer import FlashInferSupport, probe_flashinfer
from vllm_sampling_plugin.selection import use_flashinfer_sampler

SUPPORTED = FlashInferSupport(True, True)
NO_IMPORT = FlashInferSupport(False, False, "flashinfer cannot be imported (boom)")
OLD_GPU = FlashInferSupport(
    True, False, "compute capability 7.0 is outside the range FlashInfer's "
    "sampling kernels support (7.5 to 12.1)"
)


class _Keep(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records = []

    def emit(self, record):
        self.records.append(record)


@pytest.fixture
def plugin_log():
    """The plugin logger's records (vLLM's "vllm" logger does not propagate
    to the root logger that plugin_log watches)."""
    logger = logging.getLogger("vllm.vllm_sampling_plugin")
    keep, level = _Keep(), logger.level
    logger.addHandler(keep)
    logger.setLevel(logging.DEBUG)
    yield keep.records
    logger.removeHandler(keep)
    logger.setLevel(level)


def _decide(setting, support, records):
    probed = []

    def probe():
        probed.append(True)
        return support

    used = use_flashinfer_sampler(setting, probe)
    return used, records, probed


def test_forced_on_supported_uses_flashinfer_with_one_info_line(plugin_log):
    used, records, _ = _decide(True, SUPPORTED, plugin_log)
    assert used is True
    assert [r.levelno for r in records] == [logging.INFO]
    assert "Using FlashInfer" in records[0].getMessage()


def test_default_on_supported_prefers_the_faster_fused_kernel(plugin_log):
    used, records, _ = _decide(None, SUPPORTED, plugin_log)
    assert used is False
    assert [r.levelno for r in records] == [logging.INFO]
    message = records[0].getMessage()
    assert "fused top-k/top-p kernel is faster" in message
    assert "VLLM_USE_FLASHINFER_SAMPLER=1" in message


def test_forced_on_unsupported_gpu_raises_naming_variable_and_capability(plugin_log):
    with pytest.raises(RuntimeError) as err:
        _decide(True, OLD_GPU, plugin_log)
    assert "VLLM_USE_FLASHINFER_SAMPLER=1" in str(err.value)
    assert "compute capability 7.0" in str(err.value)


def test_default_on_unsupported_gpu_logs_one_info_line_not_a_warning(plugin_log):
    # Unset, the fused kernel takes top-k/top-p batches anyway: nothing is wrong.
    used, records, _ = _decide(None, OLD_GPU, plugin_log)
    assert used is False
    assert [r.levelno for r in records] == [logging.INFO]
    message = records[0].getMessage()
    assert "compute capability 7.0" in message and "fused top-k/top-p kernel" in message
    assert "warning" not in message


@pytest.mark.parametrize("setting", [None, True])
def test_import_failure_falls_back_with_one_info_line(setting, plugin_log):
    used, records, _ = _decide(setting, NO_IMPORT, plugin_log)
    assert used is False
    assert [r.levelno for r in records] == [logging.INFO]
    assert "cannot be imported" in records[0].getMessage()


def test_off_does_not_probe_and_logs_one_info_line(plugin_log):
    used, records, probed = _decide(False, SUPPORTED, plugin_log)
    assert used is False and probed == []
    assert [r.levelno for r in records] == [logging.INFO]
    assert "VLLM_USE_FLASHINFER_SAMPLER=0" in records[0].getMessage()


def test_real_probe_without_cuda_reports_why():
    import torch

    support = probe_flashinfer()
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert support.usable is False
    assert support.reason  # "no CUDA device" or an import failure, never silent
