"""Helpers shared by the layout tests (no tests here): tiny random instances, brute force."""

from __future__ import annotations

import itertools
import random

import numpy as np

from planner.layout import Buffer
from planner.layout.instance import LayoutInstance


def random_buffers(rng: random.Random, n: int, *, horizon: int = 6, max_units: int = 4,
                   unit: int = 64) -> list[Buffer]:
    buffers = []
    for i in range(n):
        lower = rng.randrange(0, horizon)
        upper = rng.randrange(lower + 1, horizon + 1)
        buffers.append(Buffer(f"t{i}", lower, upper, rng.randint(1, max_units) * unit))
    return buffers


def brute_force_arena(buffers: list[Buffer], alignment: int = 64) -> int:
    """The optimal arena size, by trying every order of placement with lowest-offset placement.

    Exact: sort the buffers of an optimal layout by offset and place them in that order, each at
    the lowest aligned offset free of the already placed buffers live at a common step; by
    induction each lands at or below its optimal offset, so some order reaches the optimum.
    Written independently of planner.layout (plain loops, no numpy).
    """
    def padded(b: Buffer) -> int:
        a = b.alignment or alignment
        return -(-b.size // a) * a

    best = None
    for order in itertools.permutations(range(len(buffers))):
        placed: list[tuple[int, int, int, int]] = []  # lower, upper, start, end
        top = 0
        for i in order:
            b = buffers[i]
            a = b.alignment or alignment
            size = padded(b)
            live = sorted((s, e) for lo, hi, s, e in placed if lo < b.upper and b.lower < hi)
            off = 0
            for s, e in live:
                if off + size <= s:
                    break
                off = max(off, -(-e // a) * a)
            placed.append((b.lower, b.upper, off, off + size))
            top = max(top, off + size)
            if best is not None and top >= best:
                break
        if best is None or top < best:
            best = top
    return best or 0


def tight_rects(n: int, seed: int, *, capacity_units: int = 64,
                horizon: int = 40) -> list[tuple[int, int, int, int]]:
    """``n`` pieces ``(t0, t1, a0, a1)`` of a guillotine cut of the rectangle
    ``[0, horizon) x [0, capacity_units)`` (shuffled): time side, address side in units."""
    rng = random.Random(seed)
    rects = [(0, horizon, 0, capacity_units)]
    while len(rects) < n:
        k = rng.randrange(len(rects))
        t0, t1, a0, a1 = rects[k]
        if rng.random() < 0.5 and t1 - t0 >= 2:
            c = rng.randint(t0 + 1, t1 - 1)
            rects[k:k + 1] = [(t0, c, a0, a1), (c, t1, a0, a1)]
        elif a1 - a0 >= 2:
            c = rng.randint(a0 + 1, a1 - 1)
            rects[k:k + 1] = [(t0, t1, a0, c), (t0, t1, c, a1)]
    rng.shuffle(rects)
    return rects


def tight_buffers(n: int, seed: int, *, capacity_units: int = 64, horizon: int = 40,
                  unit: int = 64) -> list[Buffer]:
    """``n`` buffers cut out of a time x address rectangle: 100% packed at every step, so the
    optimum arena is exactly ``capacity_units * unit`` (guillotine cuts, then shuffled)."""
    rects = tight_rects(n, seed, capacity_units=capacity_units, horizon=horizon)
    return [Buffer(f"r{i}", t0, t1, (a1 - a0) * unit) for i, (t0, t1, a0, a1) in enumerate(rects)]


def unit_instance(rows: list[tuple[int, int, int]], steps: list[int] | None = None,
                  ) -> LayoutInstance:
    """A LayoutInstance of free buffers given as (lower, upper, size) rows, 1-byte units, no
    zone (alignment steps: 1 unless given)."""
    n = len(rows)
    return LayoutInstance(
        ids=tuple(f"b{i}" for i in range(n)),
        lower=np.array([r[0] for r in rows]), upper=np.array([r[1] for r in rows]),
        size=np.array([r[2] for r in rows]),
        step=np.array(steps if steps is not None else [1] * n),
        fixed=np.zeros(n, dtype=bool), fixed_off=np.full(n, -1), in_zone=np.zeros(n, dtype=bool),
        zone_top=0, unit=1,
    )
