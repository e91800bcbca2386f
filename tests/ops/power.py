"""Sizing goodness-of-fit tests by their power.

A chi-square test of ``draws`` samples against the distribution ``null``
(over the tokens it gives mass),
when they really come from ``alternative``, has a statistic that is about
noncentral chi-square with ``len(null) - 1`` degrees of freedom and
noncentrality ``draws * sum((alternative - null)**2 / null)``. Its power at
cut-off ``alpha`` is the chance that this statistic exceeds the central
chi-square's ``1 - alpha`` quantile. A binomial count is the two-bin case.

An alternative that puts mass ``m`` where the null has none is caught
outright by a single draw there (the tests check the support first), which
``draws`` draws make with probability ``1 - (1 - m) ** draws``.
"""

import math

import numpy as np
from scipy import stats


def chi_square_power(null, alternative, draws: int, alpha: float) -> float:
    null = np.asarray(null, dtype=np.float64)
    alternative = np.asarray(alternative, dtype=np.float64)
    support = null > 0
    degrees = int(support.sum()) - 1
    difference = alternative[support] - null[support]
    noncentrality = draws * float(np.sum(difference**2 / null[support]))
    return float(stats.ncx2.sf(stats.chi2.isf(alpha, degrees), degrees, noncentrality))


def draws_for_power(null, alternative, alpha: float, power: float = 0.99) -> int:
    """The fewest draws whose test at ``alpha`` tells ``alternative`` from
    ``null`` with at least ``power``."""
    null = np.asarray(null, dtype=np.float64)
    alternative = np.asarray(alternative, dtype=np.float64)
    outside = float(alternative[null == 0].sum())
    if outside > 0:
        return math.ceil(math.log(1 - power) / math.log1p(-outside))
    low, high = 1, 2
    while chi_square_power(null, alternative, high, alpha) < power:
        low, high = high, 2 * high
    while low < high:
        middle = (low + high) // 2
        if chi_square_power(null, alternative, middle, alpha) < power:
            low = middle + 1
        else:
            high = middle
    return high
