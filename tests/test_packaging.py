"""The installed distribution's requirements never replace a user's vLLM."""

from importlib.metadata import requires

from packaging.requirements import Requirement
from packaging.version import Version


def _runtime_requirements() -> dict[str, Requirement]:
    reqs = [Requirement(r) for r in requires("vllm-sampling-plugin")]
    return {r.name: r for r in reqs if r.marker is None}


def test_vllm_has_no_upper_bound():
    vllm = _runtime_requirements()["vllm"]
    for newer in ("0.21.0", "0.32.0", "0.33.0", "1.0.0"):
        assert vllm.specifier.contains(Version(newer)), (newer, str(vllm))
    assert not vllm.specifier.contains(Version("0.19.0"))


def test_nothing_vllm_pins_is_pinned_at_run_time():
    runtime = _runtime_requirements()
    for name in ("torch", "triton", "flashinfer-python"):
        if name in runtime:
            assert str(runtime[name].specifier) == "", (name, str(runtime[name]))


def test_test_extra_installs_the_tested_release_line():
    test_reqs = [Requirement(r) for r in requires("vllm-sampling-plugin")]
    vllm = [r for r in test_reqs if r.name == "vllm" and r.marker is not None]
    assert vllm and all(r.marker.evaluate({"extra": "test"}) for r in vllm)
    assert all(r.specifier.contains(Version("0.20.2")) for r in vllm)
    assert not any(r.specifier.contains(Version("0.21.0")) for r in vllm)
