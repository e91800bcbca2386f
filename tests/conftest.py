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
