"""The five FlashInfer selection cases, with the probe replaced."""

import logging

import pytest

from vllm_sampling_plugin.ops.flashinfer import FlashInferSupport, probe_flashinfer
from vllm_sampling_plugin.selection import use_flashinfer_sampler

SUPPORTED = FlashInferSupport(True, True)
NO_IMPORT = FlashInferSupport(False, False, "flashinfer cannot be imported (boom)")
OLD_GPU = FlashInferSupport(
    True, False, "compute capability 7.0 is outside the range FlashInfer's "
    "sampling kernels support (7.5 to 12.1)"
)


def _decide(setting, support, caplog):
    probed = []

    def probe():
        probed.append(True)
        return support

    with caplog.at_level(logging.INFO, logger="vllm.vllm_sampling_plugin"):
        used = use_flashinfer_sampler(setting, probe)
    records = [r for r in caplog.records if r.name == "vllm.vllm_sampling_plugin"]
    return used, records, probed


@pytest.mark.parametrize("setting", [None, True])
def test_supported_uses_flashinfer_with_one_info_line(setting, caplog):
    used, records, _ = _decide(setting, SUPPORTED, caplog)
    assert used is True
    assert [r.levelno for r in records] == [logging.INFO]
    assert "Using FlashInfer" in records[0].getMessage()


def test_forced_on_unsupported_gpu_raises_naming_variable_and_capability(caplog):
    with pytest.raises(RuntimeError) as err:
        _decide(True, OLD_GPU, caplog)
    assert "VLLM_USE_FLASHINFER_SAMPLER=1" in str(err.value)
    assert "compute capability 7.0" in str(err.value)


def test_default_on_unsupported_gpu_warns_once_with_how_to_silence(caplog):
    used, records, _ = _decide(None, OLD_GPU, caplog)
    assert used is False
    assert [r.levelno for r in records] == [logging.WARNING]
    assert "VLLM_USE_FLASHINFER_SAMPLER=0" in records[0].getMessage()


@pytest.mark.parametrize("setting", [None, True])
def test_import_failure_falls_back_with_one_info_line(setting, caplog):
    used, records, _ = _decide(setting, NO_IMPORT, caplog)
    assert used is False
    assert [r.levelno for r in records] == [logging.INFO]
    assert "cannot be imported" in records[0].getMessage()


def test_off_does_not_probe_and_logs_one_info_line(caplog):
    used, records, probed = _decide(False, SUPPORTED, caplog)
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
