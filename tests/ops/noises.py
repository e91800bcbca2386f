"""The noises a sampling kernel draws, as one pytest parametrization:
FP32 and FP64, each from both streams (ops/random.py)."""

import pytest

NOISES = pytest.mark.parametrize(
    "noise",
    [
        dict(use_fp64=False),
        dict(use_fp64=False, fp32_stream="murmur3"),
        dict(use_fp64=True, fp64_stream="philox"),
        dict(use_fp64=True, fp64_stream="murmur3"),
    ],
    ids=["fp32", "fp32_murmur3", "fp64_philox", "fp64_murmur3"],
)
