"""The installed distribution's requirements never replace a user's vLLM,
the wheel holds the product only (the lab, benchmarks/, stays in the
checkout), and the package's metadata: license, classifiers."""

import hashlib
import tomllib
from importlib.metadata import requires
from pathlib import Path

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


ROOT = REPO_ROOT
PACKAGE = "vllm_sampling_plugin"
# Issue 60: what the wheel ships stays small enough to read.
MOST_PYTHON_LINES = 13_000

def _wheel_files() -> tuple[list[str], list[Path]]:
    """The wheel's packages and the checkout's files they ship: setuptools'
    package discovery over pyproject.toml's include patterns and package data
    (the discovery a wheel build runs, without building one, and without the
    installed setuptools validating metadata it may be too old to read)."""
    from setuptools import find_packages

    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    packages = find_packages(where=str(ROOT), include=tool["packages"]["find"]["include"])
    files = []
    for package in packages:
        directory = ROOT / package.replace(".", "/")
        files += sorted(directory.glob("*.py"))
        for pattern in tool.get("package-data", {}).get(package, []):
            files += sorted(directory.glob(pattern))
    return packages, files


def test_the_wheel_ships_the_product_and_no_lab():
    packages, files = _wheel_files()
    assert all(p == PACKAGE or p.startswith(f"{PACKAGE}.") for p in packages), packages
    shipped = [str(path.relative_to(ROOT)) for path in files]
    lab = [name for name in shipped
           if {"bench", "benchmarks", "soak"} & set(Path(name).with_suffix("").parts)]
    assert lab == []
    # info's ratios travel with it: the data file and its reader, not the writer.
    assert {f"{PACKAGE}/data/measurements.json", f"{PACKAGE}/measurements.py"} <= set(shipped)


def test_the_wheel_holds_at_most_13000_lines_of_python():
    _, files = _wheel_files()
    lines = sum(len(path.read_text().splitlines()) for path in files if path.suffix == ".py")
    assert lines <= MOST_PYTHON_LINES


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
