"""Searches over one knob: the largest value that still fits (binary search on a monotone need)."""

from __future__ import annotations

from collections.abc import Callable


def largest_fitting(fits: Callable[[int], bool], low: int, high: int) -> int | None:
    """The largest n in [low, high] with fits(n), assuming fits is monotone (True then False).

    None when even `low` does not fit.
    """
    if high < low or not fits(low):
        return None
    if fits(high):
        return high
    lo, hi = low, high  # fits(lo) and not fits(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo
