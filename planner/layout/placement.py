"""The one placement engine the heuristics share: place buffers one by one in a given order.

Each buffer goes into a free address gap among the already placed buffers that overlap it in
time (fixed buffers are placed from the start). "first" fit takes the lowest gap that fits
(TFLite/XLA greedy), "best" fit the gap that leaves the least room (ties: lowest), falling back
to the top of the conflicting buffers.

Two things keep this near linear on traces of tens of thousands of buffers, where a scan of every
placed buffer per buffer took seconds (a 20,000-op chain: 24,000 buffers, 1.7 s a heuristic):
- the placed buffers that may overlap one in time are found by an index: the short-lived ones
  (most of them) sorted by start, so only those starting within the longest short lifetime
  before it are looked at; the few long-lived ones are scanned;
- a ``chain`` of nested lifetimes (OLLA's pyramid, each inside the one before) stacked from the
  floor fills one address range at every step, from the floor to the top of the members live
  then (the staircase): it enters each later buffer's gap search as that one range, instead of
  the thousands of chain members live at its steps.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from planner.layout.instance import LayoutInstance
from planner.layout.intervals import live_profile

_TOP = np.iinfo(np.int64).max // 4
# lifetimes longer than this quantile of the placed buffers' are scanned rather than indexed
_SHORT_QUANTILE = 0.99
# below this many buffers to place, scanning them all is faster than the index
_INDEX_FROM = 4_000
# up to this many placed buffers in the way, the gap search runs in plain Python
_FEW_HITS = 8


def _range_max(values: np.ndarray, first: np.ndarray, last: np.ndarray) -> np.ndarray:
    """``max(values[first[k]:last[k] + 1])`` for every k (``first <= last``): a sparse table."""
    levels = [values]
    width = 1
    while 2 * width <= len(values):
        prev = levels[-1]
        levels.append(np.maximum(prev[:-width], prev[width:]))
        width *= 2
    span = last - first + 1
    k = np.zeros(len(span), dtype=np.int64) if len(span) == 0 else (
        np.floor(np.log2(span)).astype(np.int64))
    out = np.empty(len(first), dtype=values.dtype)
    for level in np.unique(k).tolist():
        sel = k == level
        table = levels[level]
        out[sel] = np.maximum(table[first[sel]], table[last[sel] - (1 << level) + 1])
    return out


def _staircase(instance: LayoutInstance, chain: np.ndarray, who: np.ndarray) -> np.ndarray:
    """For each buffer ``who``: the top of the stacked ``chain`` over its lifetime (the floor
    where no chain member is live then)."""
    base = instance.zone_top
    times, load = live_profile(instance.lower, instance.upper, instance.size, chain)
    lo, hi = instance.lower[who], instance.upper[who]
    first = np.maximum(np.searchsorted(times, lo, side="right") - 1, 0)
    last = np.minimum(np.searchsorted(times, hi, side="left") - 1, len(load) - 1)
    top = np.full(len(who), base, dtype=np.int64)
    inside = first <= last
    top[inside] = base + _range_max(load, first[inside], last[inside])
    return top


class _Placed:
    """The placed buffers, indexed for "which of them are live at some step of [lo, hi)"."""

    def __init__(self, instance: LayoutInstance, order: np.ndarray, obstacles: np.ndarray):
        lower, upper = instance.lower, instance.upper
        duration = upper[order] - lower[order]
        self.limit = (int(np.quantile(duration, _SHORT_QUANTILE))
                      if len(order) >= _INDEX_FROM else -1)
        short = order[duration <= self.limit]
        by_start = short[np.argsort(lower[short], kind="stable")]
        self.pos = np.full(instance.n, -1, dtype=np.int64)
        self.pos[by_start] = np.arange(len(by_start))
        self.s_lo = lower[by_start]
        self.s_hi = upper[by_start]
        self.s_off = np.zeros(len(by_start), dtype=np.int64)
        self.s_end = np.zeros(len(by_start), dtype=np.int64)
        self.s_placed = np.zeros(len(by_start), dtype=bool)
        # per buffer of ``order``: the slice of short ones that may overlap it
        self.a = np.zeros(instance.n, dtype=np.int64)
        self.b = np.zeros(instance.n, dtype=np.int64)
        self.a[order] = np.searchsorted(self.s_lo, lower[order] - self.limit, side="right")
        self.b[order] = np.searchsorted(self.s_lo, upper[order], side="left")
        cap = len(obstacles) + len(order) - len(short)
        self.l_lo = np.empty(cap, dtype=np.int64)
        self.l_hi = np.empty(cap, dtype=np.int64)
        self.l_off = np.empty(cap, dtype=np.int64)
        self.l_end = np.empty(cap, dtype=np.int64)
        self.k = 0
        for j in obstacles.tolist():
            self.add(j, int(lower[j]), int(upper[j]), int(instance.fixed_off[j]),
                     int(instance.fixed_off[j] + instance.size[j]))

    def add(self, i: int, lo: int, hi: int, off: int, end: int) -> None:
        p = int(self.pos[i])
        if p >= 0:
            self.s_off[p], self.s_end[p], self.s_placed[p] = off, end, True
            return
        k = self.k
        self.l_lo[k], self.l_hi[k], self.l_off[k], self.l_end[k] = lo, hi, off, end
        self.k = k + 1

    def hits(self, i: int, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        """Offsets and ends of the placed buffers live at some step of ``[lo, hi)``."""
        k = self.k
        live = (self.l_lo[:k] < hi) & (self.l_hi[:k] > lo)
        off, end = self.l_off[:k][live], self.l_end[:k][live]
        if self.limit >= 0:
            a, b = int(self.a[i]), int(self.b[i])
            live = self.s_placed[a:b] & (self.s_hi[a:b] > lo)
            if live.any():
                off = np.concatenate((off, self.s_off[a:b][live]))
                end = np.concatenate((end, self.s_end[a:b][live]))
        return off, end


def _gap(h_off: np.ndarray, h_end: np.ndarray, bottom: int, s: int, a: int, best: bool) -> int:
    """The offset for a buffer of size ``s`` and alignment ``a`` among the address ranges
    ``[h_off, h_end)`` taken at its steps, from ``bottom`` up: the lowest gap that fits, or the
    one that leaves the least room (``best``), else the top."""
    by_off = np.argsort(h_off, kind="stable")
    h_off = h_off[by_off]
    reach = np.maximum.accumulate(h_end[by_off])
    starts = np.empty(len(h_off) + 1, dtype=np.int64)
    starts[0] = bottom
    np.maximum(reach, bottom, out=starts[1:])
    if a > 1:
        starts = -(-starts // a) * a
    limits = np.empty(len(h_off) + 1, dtype=np.int64)
    limits[:-1] = h_off
    limits[-1] = _TOP
    room = limits - starts - s
    if best:
        room = np.where(room >= 0, room, _TOP)
        return int(starts[int(np.argmin(room))])
    return int(starts[int(np.argmax(room >= 0))])


def _gap_few(h_off: list[int], h_end: list[int], bottom: int, s: int, a: int,
             best: bool) -> int:
    """`_gap` in plain Python, faster where a buffer meets only a few placed ones (most of
    them, on long traces)."""
    reach, chosen, least = bottom, -1, _TOP
    for off, end in sorted(zip(h_off, h_end, strict=True), key=lambda pair: pair[0]):
        start = -(-reach // a) * a
        room = off - start - s
        if room >= 0 and (not best or room < least):
            chosen, least = start, room
            if not best:
                return chosen
        reach = max(reach, end)
    top = -(-reach // a) * a
    return top if chosen < 0 else chosen


def place_in_order(
    instance: LayoutInstance, order: Sequence[int] | np.ndarray, fit: str = "first",
    chain: Sequence[int] | np.ndarray = (),
) -> np.ndarray:
    """Offsets (units) for every buffer: fixed ones as given, ``chain`` (free buffers, each
    lifetime inside the one before) first, then ``order`` (free ones) placed."""
    if fit not in ("first", "best"):
        raise ValueError(f"unknown fit {fit!r}")
    best = fit == "best"
    offsets = instance.fixed_off.copy()
    obstacles = instance.obstacle_idx
    order = np.asarray(order, dtype=np.int64)
    stacked = np.asarray(chain, dtype=np.int64)
    base = instance.zone_top
    floor = np.full(instance.n, base, dtype=np.int64)
    if len(stacked) and (len(obstacles) or np.any(instance.step[stacked] > 1)):
        # gaps left by alignment or pre-placed buffers would break the staircase: the chain
        # is placed as the first buffers of the order instead (same offsets, slower)
        order, stacked = np.concatenate((stacked, order)), stacked[:0]
    if len(stacked):
        sizes = instance.size[stacked]
        offsets[stacked] = base + np.cumsum(sizes) - sizes
        floor[order] = _staircase(instance, stacked, order)
    placed = _Placed(instance, order, obstacles)
    lower = instance.lower.tolist()
    upper = instance.upper.tolist()
    size = instance.size.tolist()
    step = instance.step.tolist()
    floors = floor.tolist()
    for i in order.tolist():
        lo, hi, s, a, bottom = lower[i], upper[i], size[i], step[i], floors[i]
        h_off, h_end = placed.hits(i, lo, hi)
        if len(h_off) <= _FEW_HITS:
            off = _gap_few(h_off.tolist(), h_end.tolist(), bottom, s, a, best)
        else:
            off = _gap(h_off, h_end, bottom, s, a, best)
        offsets[i] = off
        placed.add(i, lo, hi, off, off + s)
    return offsets
