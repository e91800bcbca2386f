"""The launch plans' integer helpers equal Triton's for every input they get."""

import triton

from vllm_sampling_plugin.ops.host_math import cdiv, next_power_of_2

VALUES = [*range(1, 5000), 151936, 152064, 256000, (1 << 30) - 1, 1 << 30, (1 << 40) + 3]


def test_next_power_of_2_matches_triton():
    assert [next_power_of_2(n) for n in VALUES] == [triton.next_power_of_2(n) for n in VALUES]


def test_cdiv_matches_triton():
    divisors = [1, 2, 3, 4, 16, 17, 1024, 2048, 4096, 151936]
    pairs = [(a, b) for a in VALUES[::7] for b in divisors]
    assert [cdiv(a, b) for a, b in pairs] == [triton.cdiv(a, b) for a, b in pairs]
