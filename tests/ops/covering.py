"""Fewer parameter combinations that still meet every pair of values.

Interpreted kernels cost seconds a launch on CPU CI, so the full product of
several parameters is out of reach; a bug that needs one value, or two values
together, still shows in some combination of a pairwise cover.
"""

from __future__ import annotations

import itertools


def pairwise_cover(*axes: tuple) -> list[tuple]:
    """Combinations of one value per axis, in product order, such that every
    value of every axis and every pair of values of two axes occurs in one of
    them; always with the all-first and all-last combinations (every option
    off, every option on, where axes list off first). Chosen greedily, so
    deterministic."""
    combos = list(itertools.product(*axes))

    def pairs(combo: tuple) -> set[tuple]:
        return {(i, combo[i], j, combo[j]) for i, j in itertools.combinations(range(len(combo)), 2)}

    chosen = {combos[0], combos[-1]}
    uncovered = set().union(*map(pairs, combos)) - set().union(*map(pairs, chosen))
    unseen = set().union(*(set(enumerate(c)) for c in combos)) - set().union(*(set(enumerate(c)) for c in chosen))
    while uncovered or unseen:
        best = max(
            (c for c in combos if c not in chosen),
            key=lambda c: (len(pairs(c) & uncovered), len(set(enumerate(c)) & unseen)),
        )
        chosen.add(best)
        uncovered -= pairs(best)
        unseen -= set(enumerate(best))
    return [c for c in combos if c in chosen]
