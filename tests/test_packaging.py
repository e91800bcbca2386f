"""The installed distribution's requirements never replace a user's vLLM,
and the wheel holds the product only: the lab (benchmarks/) stays in the checkout."""

import json
import subprocess
import sys
from importlib.metadata import requires
from pathlib import Path

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


ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "vllm_sampling_plugin"
# Issue 60: what the wheel ships stays small enough to read.
MOST_PYTHON_LINES = 13_000

# What setuptools packs, read from pyproject.toml by setuptools itself (the
# same discovery a wheel build runs, without building one).
WHEEL_LAYOUT = """
import json, warnings
from setuptools.config.pyprojecttoml import apply_configuration
from setuptools.dist import Distribution
warnings.simplefilter("ignore")
dist = apply_configuration(Distribution(), "pyproject.toml")
print(json.dumps({"packages": dist.packages, "package_data": dist.package_data}))
"""


def _wheel_files() -> tuple[list[str], list[Path]]:
    """The wheel's packages and the checkout's files they ship."""
    proc = subprocess.run([sys.executable, "-c", WHEEL_LAYOUT], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    layout = json.loads(proc.stdout)
    files = []
    for package in layout["packages"]:
        directory = ROOT / package.replace(".", "/")
        files += sorted(directory.glob("*.py"))
        for pattern in layout["package_data"].get(package, []):
            files += sorted(directory.glob(pattern))
    return layout["packages"], files


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
