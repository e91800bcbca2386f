"""The installed distribution's requirements never replace a user's vLLM;
the package's metadata: license, classifiers."""

import hashlib
import tomllib
from importlib.metadata import requires

from packaging.requirements import Requirement
from packaging.version import Version

from tests.integration.helpers import REPO_ROOT


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


# The metadata a package index and `pip show` read (issue 61 item 8), from
# pyproject.toml: the installed distribution may be another checkout's.
PROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
# sha256 of the Apache License 2.0's standard text, as apache.org serves it.
APACHE_2_0_SHA256 = "c71d239df91726fc519c6eb72d318ec65820627232b2f796219e87dcf35d0ab4"


def test_license_is_apache_2_0_in_spdx_form_with_its_standard_text():
    assert PROJECT["license"] == "Apache-2.0"
    assert PROJECT["license-files"] == ["LICENSE"]
    text = (REPO_ROOT / "LICENSE").read_bytes()
    assert hashlib.sha256(text).hexdigest() == APACHE_2_0_SHA256


def test_classifiers_say_what_the_package_runs_on_and_no_license_classifier():
    """PEP 639: with a license expression, a License :: classifier is an error."""
    classifiers = PROJECT["classifiers"]
    assert "Environment :: GPU :: NVIDIA CUDA" in classifiers
    assert "Operating System :: POSIX :: Linux" in classifiers
    assert not [c for c in classifiers if c.startswith("License ::")]


def test_the_build_backend_reads_the_spdx_license():
    """setuptools reads `license = "..."` and `license-files` from 77 on."""
    build = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["build-system"]
    setuptools = next(Requirement(r) for r in build["requires"]
                      if Requirement(r).name == "setuptools")
    assert not setuptools.specifier.contains(Version("76.1"))
    assert setuptools.specifier.contains(Version("77.0.0"))
