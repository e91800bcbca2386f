"""The reduction every kernel shares: the largest value and the lowest id holding it.

Ties go to the lowest id, as ``torch.argmax`` breaks them, which is what makes a
token independent of how a row is split into lanes, chunks and programs.
"""

import triton
import triton.language as tl


@triton.jit
def _larger_then_lower_id(a_value, a_id, b_value, b_id):
    b_wins = (b_value > a_value) | ((b_value == a_value) & (b_id < a_id))
    return tl.where(b_wins, b_value, a_value), tl.where(b_wins, b_id, a_id)


@triton.jit
def max_lowest_id(values, ids, axis: tl.constexpr):
    """``(max, lowest id among the maxima)`` of ``values`` along ``axis``.

    One reduction over (value, id) pairs instead of a max and then a min
    over the ids that hold it. ``values`` must not hold NaN (it compares
    false both ways, so which pair survives would depend on the order).
    """
    return tl.reduce((values, ids), axis, _larger_then_lower_id)
