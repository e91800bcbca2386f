"""Integer arithmetic of the launch plans, at plain-Python cost.

Triton 3.6 makes ``triton.cdiv`` and ``triton.next_power_of_2``
``ConstexprFunction`` objects so that kernels can call them too; called on
the host, each costs about 6 us of Python, and the launchers computed a dozen
of them per sampling step. Same results for every ``n >= 1`` (the launchers
never pass less).
"""


def cdiv(a: int, b: int) -> int:
    """``ceil(a / b)`` for positive ``b``."""
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    """The smallest power of two ``>= n``, for ``n >= 1``."""
    return 1 << (n - 1).bit_length()
