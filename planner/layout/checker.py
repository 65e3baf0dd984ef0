"""An independent check of a layout: does every buffer have a valid place?

Deliberately shares no code with the layout algorithms (the plan validator uses it too). It
checks the physical truth with the raw sizes: two buffers live at a common step must not share
a byte, every buffer lies inside ``[0, arena_size)``, every offset is a multiple of the buffer's
alignment, and pre-placed buffers keep their offsets. Returns human-readable violations; an
empty list means the layout is valid.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Mapping, Sequence

import numpy as np

from planner.layout.types import DEFAULT_ALIGNMENT, Buffer, Layout

MAX_REPORTED_OVERLAPS = 200


def check_layout(
    buffers: Sequence[Buffer],
    layout: Layout | Mapping[str, int],
    alignment: int = DEFAULT_ALIGNMENT,
) -> list[str]:
    """Violations of ``layout`` (a Layout, or a plain id -> offset mapping with no arena check)."""
    if isinstance(layout, Layout):
        offsets: Mapping[str, int] = layout.offsets
        arena: int | None = layout.arena_size
    else:
        offsets, arena = layout, None
    problems: list[str] = []
    known = {b.id for b in buffers}
    for extra in sorted(set(offsets) - known):
        problems.append(f"layout has an offset for unknown buffer {extra!r}")

    placed: list[tuple[Buffer, int]] = []
    for buf in buffers:
        if buf.id not in offsets:
            problems.append(f"buffer {buf.id!r} has no offset")
            continue
        off = offsets[buf.id]
        align = buf.alignment if buf.alignment is not None else alignment
        if off < 0:
            problems.append(f"buffer {buf.id!r} at offset {off} lies below the arena start")
        if arena is not None and off + buf.size > arena:
            problems.append(
                f"buffer {buf.id!r} [{off}, {off + buf.size}) ends past the arena size {arena}"
            )
        if align and off % align:
            problems.append(f"buffer {buf.id!r} offset {off} is not a multiple of {align}")
        if buf.offset is not None and off != buf.offset:
            problems.append(
                f"pre-placed buffer {buf.id!r} was moved from offset {buf.offset} to {off}"
            )
        placed.append((buf, off))
    problems.extend(_overlaps(placed))
    return problems


def _overlaps(placed: list[tuple[Buffer, int]]) -> list[str]:
    """Pairs live at a common step whose byte ranges intersect (sweep over start times). A valid
    layout, the common case, is shown so by `_disjoint` in O(n log n); only a layout it cannot
    clear has its pairs listed (one numpy scan per buffer: 0.4 s on a 24,000-buffer chain)."""
    if len(placed) < 2 or _disjoint(placed):
        return []
    lo = np.asarray([b.lower for b, _ in placed], dtype=np.int64)
    hi = np.asarray([b.upper for b, _ in placed], dtype=np.int64)
    start = np.asarray([o for _, o in placed], dtype=np.int64)
    end = start + np.asarray([b.size for b, _ in placed], dtype=np.int64)
    order = np.argsort(lo, kind="stable")
    lo, hi, start, end = lo[order], hi[order], start[order], end[order]
    found: list[str] = []
    total = 0
    for k in range(len(order) - 1):
        # later buffers (by start time) that begin before buffer k ends are live with it
        last = int(np.searchsorted(lo, hi[k], side="left"))
        if last <= k + 1:
            continue
        seg = slice(k + 1, last)
        clash = np.flatnonzero((start[seg] < end[k]) & (end[seg] > start[k]))
        total += len(clash)
        for j in clash[: max(0, MAX_REPORTED_OVERLAPS - len(found))].tolist():
            a, oa = placed[int(order[k])]
            b, ob = placed[int(order[k + 1 + j])]
            t0, t1 = max(a.lower, b.lower), min(a.upper, b.upper)
            a0, a1 = max(oa, ob), min(oa + a.size, ob + b.size)
            found.append(
                f"buffers {a.id!r} and {b.id!r} overlap: both live in steps [{t0}, {t1}) and "
                f"both use bytes [{a0}, {a1})"
            )
    if total > len(found):
        found.append(f"... and {total - len(found)} more overlapping pairs")
    return found


def _disjoint(placed: list[tuple[Buffer, int]]) -> bool:
    """Whether no two buffers live at a common step share a byte, by a sweep over time keeping
    the live byte ranges sorted by offset: while they are disjoint, a new range intersects one
    of them only if it intersects its neighbour on either side. False also when that cannot
    decide (a zero-size buffer, which the pairwise scan judges on its own)."""
    if any(b.size <= 0 for b, _ in placed):
        return False
    starts: list[int] = []
    ends: list[int] = []
    live: list[tuple[int, int, int]] = []  # (last step + 1, offset, end), a heap
    for b, offset in sorted(placed, key=lambda p: p[0].lower):
        while live and live[0][0] <= b.lower:
            _, gone, _ = heapq.heappop(live)
            k = bisect.bisect_left(starts, gone)
            del starts[k], ends[k]
        end = offset + b.size
        k = bisect.bisect_right(starts, offset)
        if (k and ends[k - 1] > offset) or (k < len(starts) and starts[k] < end):
            return False
        starts.insert(k, offset)
        ends.insert(k, end)
        heapq.heappush(live, (b.upper, offset, end))
    return True
