"""Time structure of the buffers: independent components and cross-sections.

Lifetimes are fixed intervals, so the conflict graph is an interval graph:
- a *cut line* is a time no free buffer spans; the free buffers on either side never conflict,
  so the instance splits into independent components (only fixed buffers may cross a cut);
- buffers that conflict pairwise are all live at one common time (Helly property for
  intervals), so "no two conflicting buffers overlap in address" is exactly "at each maximal
  cross-section (a maximal set of buffers live at one time) the address ranges are disjoint".
  There are at most n maximal cross-sections (MiniMalloc's "sections" with equal live sets).
"""

from __future__ import annotations

import numpy as np


def time_components(lower: np.ndarray, upper: np.ndarray, idx: np.ndarray) -> list[np.ndarray]:
    """Split buffer indices ``idx`` at cut lines; each component is sorted by lower, then index."""
    if len(idx) == 0:
        return []
    order = idx[np.lexsort((idx, lower[idx]))]
    lo = lower[order]
    reach = np.maximum.accumulate(upper[order])
    starts_new = np.flatnonzero(lo[1:] >= reach[:-1]) + 1
    return np.split(order, starts_new)


def live_profile(
    lower: np.ndarray, upper: np.ndarray, size: np.ndarray, idx: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The distinct lifetime ends of ``idx`` (``times``) and the live sizes between each two
    consecutive ones (``load[k]``: the sizes live in ``[times[k], times[k + 1])``)."""
    times = np.unique(np.concatenate((lower[idx], upper[idx])))
    delta = np.zeros(len(times), dtype=np.int64)
    np.add.at(delta, np.searchsorted(times, lower[idx]), size[idx])
    np.add.at(delta, np.searchsorted(times, upper[idx]), -size[idx])
    return times, np.cumsum(delta)[:-1]


def overlapping_in_time(
    lower: np.ndarray, upper: np.ndarray, candidates: np.ndarray, start: int, end: int
) -> np.ndarray:
    """The indices among ``candidates`` whose lifetime intersects ``[start, end)``."""
    if len(candidates) == 0:
        return candidates
    mask = (lower[candidates] < end) & (upper[candidates] > start)
    return candidates[mask]


def maximal_cross_sections(
    lower: np.ndarray, upper: np.ndarray, idx: np.ndarray, max_total: int | None = None
) -> list[list[int]] | None:
    """The maximal sets of buffers (from ``idx``) live at one common time, in time order.

    Sweep over event times; a live set is maximal right before the first end that follows a
    start. Each returned list is sorted by buffer index. Returns None as soon as the sections
    hold more than ``max_total`` buffers in all.
    """
    if len(idx) == 0:
        return []
    times = np.concatenate((lower[idx], upper[idx]))
    is_end = np.concatenate((np.zeros(len(idx), dtype=bool), np.ones(len(idx), dtype=bool)))
    who = np.concatenate((idx, idx))
    order = np.lexsort((~is_end, times))  # ends first at equal times (half-open lifetimes)
    live: set[int] = set()
    sections: list[list[int]] = []
    grew = False
    total = 0
    for k in order.tolist():
        if is_end[k]:
            if grew:
                sections.append(sorted(live))
                total += len(live)
                if max_total is not None and total > max_total:
                    return None
                grew = False
            live.discard(int(who[k]))
        else:
            live.add(int(who[k]))
            grew = True
    return sections
