"""The lab writes the measured ratios the wheel's ``info`` reads."""

import json
from pathlib import Path

import pytest

from benchmarks import measurements
from vllm_sampling_plugin.measurements import ratio_text

BENCH_DATA = Path(__file__).resolve().parents[2] / "docs" / "bench-data"


def test_record_writes_a_measurement_the_reader_shows(tmp_path):
    path = tmp_path / "m.json"
    measurements.record("0.29", "rejection sampling", "1.1x", "bench upstream, H100", path)
    measurements.record("0.21", "n-gram speculator", "2x", "", path)
    data = json.loads(path.read_text())
    assert list(data) == ["0.21", "0.29"]
    assert data["0.29"]["rejection sampling"] == {"ratio": "1.1x", "source": "bench upstream, H100"}
    assert ratio_text("0.29", "rejection sampling", data) == "1.1x (bench upstream, H100)"


def test_bench_upstream_records_a_reports_ratios(tmp_path):
    pytest.importorskip("vllm")
    from benchmarks.upstream import record_ratios

    report = json.loads((BENCH_DATA / "upstream-0.33-rep9-h100.json").read_text())
    path = tmp_path / "measurements.json"
    record_ratios(report, path)
    recorded = json.loads(path.read_text())["0.33"]
    assert set(recorded) >= {"Gumbel-max sampling (no top-k/top-p)", "top-k/top-p, batches FlashInfer may not take"}
    gumbel = recorded["Gumbel-max sampling (no top-k/top-p)"]
    assert gumbel["ratio"].startswith("upstream/plugin: ")
    assert gumbel["source"] == "bench upstream, NVIDIA H100 80GB HBM3, vLLM 0.33.0"
