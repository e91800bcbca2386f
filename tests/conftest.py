"""Test set-up shared by every test.

Without a GPU the Triton kernels run through Triton's interpreter on CPU
tensors. ``TRITON_INTERPRET`` must be set before any kernel is decorated, so
it is set here, before the package is imported.
"""

import os

import pytest
import torch

HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")

# Tensors for kernel tests live where the kernels run: the GPU when there is
# one, the CPU (through the interpreter) otherwise.
DEVICE = torch.device("cuda" if HAS_CUDA else "cpu")

# A tool some tests need (Triton's ptxas for the sm_90 compile tests, numba
# for vLLM's CPU n-gram proposer) being absent fails those tests, so that CI
# cannot pass with them silently skipped. A developer without the tool sets
# this variable to 1 to skip them instead.
ALLOW_MISSING_TOOLS_ENV = "PLUGIN_TESTS_ALLOW_MISSING_TOOLS"


def missing_tool(reason: str, *, module_level: bool = False) -> None:
    """Fail (or, with PLUGIN_TESTS_ALLOW_MISSING_TOOLS=1, skip) for want of a tool."""
    if os.environ.get(ALLOW_MISSING_TOOLS_ENV) == "1":
        pytest.skip(reason, allow_module_level=module_level)
    pytest.fail(f"{reason} (set {ALLOW_MISSING_TOOLS_ENV}=1 to skip these tests)", pytrace=False)


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "e2e" in item.path.parts:
            item.add_marker(pytest.mark.gpu)
        if "gpu" in item.keywords and not HAS_CUDA:
            item.add_marker(skip_gpu)


@pytest.fixture
def device() -> torch.device:
    return DEVICE
