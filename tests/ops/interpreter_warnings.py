"""Warnings the Triton interpreter raises on correct kernels.

It evaluates both sides of every ``tl.where``, so numpy warns about the
``-inf`` arithmetic the kernels mask out. Test modules ignore them with
``pytestmark = IGNORE_MASKED_ARITHMETIC``.
"""

import pytest

IGNORE_MASKED_ARITHMETIC = [
    pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:divide by zero encountered:RuntimeWarning"),
]
