"""The one placement engine the heuristics share: place buffers one by one in a given order.

Each buffer goes into a free address gap among the already placed buffers that overlap it in
time (fixed buffers are placed from the start). "first" fit takes the lowest gap that fits
(TFLite/XLA greedy), "best" fit the gap that leaves the least room (ties: lowest), falling back
to the top of the conflicting buffers. Both depend on those buffers only through the union of
their address ranges, and the search works on that union.

Ranges as keys: the range ``[off, end)`` is the keys ``2 * off + 1`` (coverage up) and
``2 * end`` (down); sorted, a range that ends where another starts leaves no gap, and the gaps
are the runs where the running coverage is zero or less. A range is subtracted as the keys
``2 * off`` and ``2 * end + 1``; the engine subtracts only ranges it also added, so the coverage
stays exact. A search runs in plain Python on few keys, with numpy otherwise.

Below `_INDEX_FROM` buffers each search checks every placed buffer (`_Scan`). On the buffer
traces of rematerialized training steps (24,000 buffers, a tenth of them live from the forward
to the backward pass) a buffer overlaps thousands of placed ones, 50 million pairs in all,
while the union of their ranges is a few runs: going through the pairs took 4-5 s a heuristic.
There `_Index` gives the union over the lifetime ``[lo, hi)`` of the next buffer as:
- the occupancy at a sample step, one every ``width`` distinct steps, at or before ``lo``: the
  union of the placed buffers live there, kept merged (the ones placed since are read one by
  one, up to `_PENDING` of them); plus the buffers starting after the sample in its block (or
  up to ``hi``), less those ending after the sample up to ``lo`` (each was added by one of the
  two, and does not meet ``[lo, hi)``);
- for a lifetime over whole blocks: the buffers starting in those, from a tree over the blocks
  whose nodes keep the merged union of the placed buffers starting in them, and one by one
  those starting in the block of ``hi``.
The order is known up front, so each part is a slice of one key array whose rows are laid out
by start, by sample, by tree node and by end, a buffer not placed yet being an empty range
(above the top, where it changes no gap): placing a buffer writes its rows. A width of the
square root of ten mean lifetimes weighs the rows a buffer writes (its lifetime over the
width) against those a search reads one by one (a width's worth).

A ``chain`` of nested lifetimes (OLLA's pyramid, each inside the one before) stacked from the
floor fills one address range at every step, from the floor to the top of the members live
then (the staircase): it enters each later buffer's search as its floor, instead of the
thousands of chain members live at its steps.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence

import numpy as np

from planner.layout.instance import LayoutInstance
from planner.layout.intervals import live_profile

_TOP = np.iinfo(np.int64).max // 4
# the coverage step of a key, by its lowest bit
_STEP = np.array([-1, 1], dtype=np.int64)
# up to this many keys, a search runs in plain Python
_FEW = 32
# a merged union's rows placed since it was merged are read one by one up to this many
_PENDING = 128
# below this many buffers to place, checking every placed one is faster than the index
_INDEX_FROM = 1_000


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


def _flips(keys: np.ndarray) -> np.ndarray:
    """Positions in sorted ``keys`` where the coverage turns from 0 to 1 or from 1 to 0 (a key
    going up lands on 1 there, one going down on 0)."""
    up = keys & 1
    return (np.add.accumulate(_STEP.take(up)) == up).nonzero()[0]


def _merged(keys: np.ndarray) -> np.ndarray:
    """The union of the ranges ``keys`` (none subtracted) as sorted keys, touching runs joined."""
    keys = np.sort(keys)
    ends = keys[_flips(keys)] >> 1
    lo, hi = ends[0::2], ends[1::2]
    apart = lo[1:] != hi[:-1]
    out = np.empty(2 * int(apart.sum()) + 2, dtype=np.int64)
    out[0::2] = 2 * lo[np.concatenate(([True], apart))] + 1
    out[1::2] = 2 * hi[np.concatenate((apart, [True]))]
    return out


def _walk(keys: list[int], s: int, a: int, best: bool) -> int:
    """`_gap` in plain Python, over sorted keys up to the top."""
    cover, free = 0, 0
    chosen, least = -1, _TOP
    for key in keys:
        if key & 1:
            cover += 1
            if cover == 1:
                start = -(-free // a) * a
                room = (key >> 1) - start - s
                if 0 <= room < least:
                    if not best:
                        return start
                    chosen, least = start, room
        else:
            cover -= 1
            if cover == 0:
                free = key >> 1
    return chosen


def _gap(keys: np.ndarray, s: int, a: int, best: bool) -> int:
    """The offset for a buffer of size ``s`` and alignment ``a`` among ``keys``: the ranges
    taken at its steps, a range up to its floor and one from far above (its top). The gaps
    are the runs between the first and the last flips of the coverage: the lowest that fits,
    or the one that leaves the least room (``best``)."""
    if len(keys) <= _FEW:
        ordered = keys.tolist()
        ordered.sort()
        # up to the top's start: the rest (its end, empty ranges) opens no gap
        return _walk(ordered[:bisect_right(ordered, 2 * _TOP + 1)], s, a, best)
    keys.sort()
    ends = keys[_flips(keys)] >> 1
    starts = ends[1:-1:2]
    if a > 1:
        starts = -(-starts // a) * a
    room = ends[2::2] - starts
    if best:
        return int(starts[np.where(room >= s, room, 2 * _TOP).argmin()])
    return int(starts[(room >= s).argmax()])


def _spread(first: np.ndarray, last: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The ranges ``[first[k], last[k])`` laid end to end: each element's k and value."""
    count = np.maximum(last - first, 0)
    owner = np.repeat(np.arange(len(first)), count)
    return owner, np.arange(len(owner)) - np.repeat(np.cumsum(count) - count - first, count)


def _grouped(owner: np.ndarray, group: np.ndarray, groups: int, m: int) -> tuple[
    np.ndarray, np.ndarray
]:
    """Rows for (owner, group) pairs listed by owner, laid out by group then owner: returns
    ``group * m + owner`` in row order (to find a group's rows, and an owner's place among
    them) and each pair's row."""
    by = group.astype(np.min_scalar_type(groups)).argsort(kind="stable")  # a radix sort
    row = np.empty(len(by), dtype=np.int64)
    row[by] = np.arange(len(by))
    return group[by] * m + owner[by], row


def _dyadic(first: np.ndarray, last: np.ndarray, leaves: int) -> tuple[np.ndarray, np.ndarray]:
    """The nodes of a tree over ``leaves`` leaves (node 1 the root, leaf ``i`` node
    ``leaves + i``) that cover the leaf ranges ``[first[k], last[k])``: each one's k, and node."""
    lo, hi, who = first + leaves, last + leaves, np.arange(len(first))
    owners, nodes = [who[:0]], [lo[:0]]
    while len(who):
        left = ((lo & 1) == 1) & (lo < hi)
        owners.append(who[left])
        nodes.append(lo[left])
        lo = lo + left
        right = ((hi & 1) == 1) & (lo < hi)
        hi = hi - right
        owners.append(who[right])
        nodes.append(hi[right])
        lo, hi = lo >> 1, hi >> 1
        on = lo < hi
        lo, hi, who = lo[on], hi[on], who[on]
    owner, node = np.concatenate(owners), np.concatenate(nodes)
    by = owner.argsort(kind="stable")
    return owner[by], node[by]


def _bounds(floor: np.ndarray) -> np.ndarray:
    """Per buffer the keys of a range up to its floor and of one from far above (its top)."""
    out = np.empty((len(floor), 4), dtype=np.int64)
    out[:, 0] = -1
    out[:, 1] = 2 * floor
    out[:, 2:] = (2 * _TOP + 1, 2 * _TOP + 2)
    return out


class _Scan:
    """The placed buffers (pre-placed ones first, numbered ``p``), all checked for each buffer
    to place."""

    def __init__(self, instance: LayoutInstance, order: np.ndarray, obstacles: np.ndarray,
                 floor: np.ndarray):
        members = np.concatenate((obstacles, order))
        self._lower, self._upper = instance.lower[members], instance.upper[members]
        self._skip = len(obstacles)
        self._ups = np.empty(len(members), dtype=np.int64)
        self._downs = np.empty(len(members), dtype=np.int64)
        self._bounds = _bounds(floor[order])

    def place(self, p: int, off: int, end: int) -> None:
        """Buffer ``p`` now takes ``[off, end)``."""
        self._ups[p] = 2 * off + 1
        self._downs[p] = 2 * end

    def keys_for(self, j: int) -> np.ndarray:
        """The keys of the ranges taken at the steps of buffer ``j`` of the order, with its
        floor and top."""
        p = self._skip + j
        lo, hi = self._lower[p], self._upper[p]
        meets = (self._lower[:p] < hi) & (self._upper[:p] > lo)
        return np.concatenate((self._ups[:p][meets], self._downs[:p][meets], self._bounds[j]))


class _Index:
    """The placed buffers (pre-placed ones included) as, for each buffer to place, slices of a
    key array (module docstring). Steps are ranks among the lifetime ends of these buffers,
    numbered ``p``: the pre-placed ones, then ``order``."""

    def __init__(self, instance: LayoutInstance, order: np.ndarray, obstacles: np.ndarray,
                 floor: np.ndarray):
        members = np.concatenate((obstacles, order))
        m = len(members)
        times = np.unique(np.concatenate((instance.lower[members], instance.upper[members])))
        low = np.searchsorted(times, instance.lower[members])
        up = np.searchsorted(times, instance.upper[members])
        width = max(8, int(np.sqrt(10 * (up - low).mean())))  # module docstring
        blocks = -(-len(times) // width)
        p = np.arange(len(obstacles), m)
        k, far = low[p] // width, up[p] // width  # the sample (block) of a start, of an end
        spans = far >= k + 2
        leaves = 1 << (blocks - 1).bit_length()
        levels = leaves.bit_length() if spans.any() else 0
        first, last = -(-low // width), -(-up // width)  # the samples each one is live at
        sample_key, sample_row = _grouped(*_spread(first, last), blocks, m)
        node = ((leaves + low // width)[:, None] >> np.arange(levels)).ravel()
        node_key, node_row = _grouped(np.repeat(np.arange(m), levels), node, 2 * leaves, m)
        by_low, by_up = low.argsort(kind="stable"), up.argsort(kind="stable")
        # rows: by start, by sample, by tree node (added), by end (subtracted)
        at_sample, at_node = m, m + len(sample_row)
        at_end = at_node + len(node_row)
        self.keys = np.empty((at_end + m, 2), dtype=np.int64)
        self.keys[:at_end] = (2 * _TOP + 5, 2 * _TOP + 4)  # empty, above the top
        self.keys[at_end:] = (2 * _TOP + 4, 2 * _TOP + 5)
        self._flat = self.keys.reshape(-1)
        self._layout(by_low.argsort(), at_sample + sample_row, at_node + node_row,
                     np.maximum(last - first, 0), levels)
        self._end_row = (2 * (at_end + by_up.argsort())).tolist()
        # per sample and tree node: its merged union, and where its rows read one by one begin
        self._sample_from = (at_sample + sample_key.searchsorted(np.arange(blocks) * m)).tolist()
        self._sample_union = [self.keys[:0, 0]] * blocks
        self._node_from = (at_node + node_key.searchsorted(np.arange(2 * leaves) * m)).tolist()
        self._node_union = [self.keys[:0, 0]] * (2 * leaves)
        # per buffer to place: its sample, the end of that sample's rows placed before it, its
        # rows by start (after the sample in its block, or up to its end, and in the block of
        # its end), by end (after the sample up to its start), its floor and top
        starts, ends, start, end = low[by_low], up[by_up], low[p], up[p]
        sample = k * width
        near_end = np.where(spans, sample + width, end)
        far_start = np.where(spans, far * width, end)
        self._query = list(zip(
            k.tolist(), (at_sample + sample_key.searchsorted(k * m + p)).tolist(),
            starts.searchsorted(sample, "right").tolist(), starts.searchsorted(near_end).tolist(),
            starts.searchsorted(far_start).tolist(), starts.searchsorted(end).tolist(),
            (at_end + ends.searchsorted(sample, "right")).tolist(),
            (at_end + ends.searchsorted(start, "right")).tolist(), strict=True,
        ))
        self._bounds = _bounds(floor[order])
        # and its tree nodes (the blocks its lifetime spans), with the end of their rows
        # placed before it
        owner, node = _dyadic(k[spans] + 1, far[spans], leaves)
        owner = np.flatnonzero(spans)[owner]
        self._node = node.tolist()
        self._node_end = (at_node + node_key.searchsorted(node * m + p[owner])).tolist()
        self._node_start = owner.searchsorted(np.arange(len(p) + 1)).tolist()

    def _layout(self, start: np.ndarray, samples: np.ndarray, nodes: np.ndarray,
                live: np.ndarray, levels: int) -> None:
        """The cells each buffer writes: its row by start, at its ``live`` samples and in its
        ``levels`` tree nodes (``samples`` and ``nodes`` listed buffer by buffer)."""
        count = 1 + live + levels
        self._row_start = np.concatenate(([0], np.cumsum(count))).tolist()
        rank = np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count)
        rows = np.empty(len(rank), dtype=np.int64)
        first = rank == 0
        rows[first] = start
        sample = ~first & (rank <= np.repeat(live, count))
        rows[sample] = samples
        rows[~first & ~sample] = nodes
        self._starts = 2 * rows  # the cells of the first key of each row, then of the second
        self._ends = 2 * rows + 1

    def place(self, p: int, off: int, end: int) -> None:
        """Buffer ``p`` now takes ``[off, end)``."""
        flat, first, last = self._flat, self._row_start[p], self._row_start[p + 1]
        flat[self._starts[first:last]] = 2 * off + 1
        flat[self._ends[first:last]] = 2 * end
        row = self._end_row[p]
        flat[row] = 2 * off
        flat[row + 1] = 2 * end + 1

    def keys_for(self, j: int) -> np.ndarray:
        """The keys (unsorted) of the ranges taken at the steps of buffer ``j`` of the order,
        with its floor and top."""
        k, stop, near, near_end, far, far_end, gone, gone_end = self._query[j]
        keys = self.keys
        pending = self._read(self._sample_from, self._sample_union, k, stop)
        parts = [self._sample_union[k], pending, keys[near:near_end].ravel(),
                 keys[gone:gone_end].ravel(), self._bounds[j]]
        if far < far_end:
            parts.append(keys[far:far_end].ravel())
        first, last = self._node_start[j], self._node_start[j + 1]
        for node, stop in zip(self._node[first:last], self._node_end[first:last], strict=True):
            pending = self._read(self._node_from, self._node_union, node, stop)
            parts += (self._node_union[node], pending)
        return np.concatenate(parts)

    def _read(self, start: list[int], union: list[np.ndarray], at: int, stop: int) -> np.ndarray:
        """The keys of rows ``start[at]`` to ``stop``, or none once they are many: then they
        are merged into ``union[at]``."""
        keys = self.keys[start[at]:stop].ravel()
        if stop - start[at] <= _PENDING:
            return keys
        union[at] = _merged(np.concatenate((union[at], keys)))
        start[at] = stop
        return keys[:0]


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
    if len(order) == 0:
        return offsets
    index = (_Index if len(order) >= _INDEX_FROM else _Scan)(instance, order, obstacles, floor)
    for p, i in enumerate(obstacles.tolist()):
        index.place(p, int(offsets[i]), int(offsets[i] + instance.size[i]))
    size = instance.size[order].tolist()
    step = instance.step[order].tolist()
    placed = []
    for j, p in enumerate(range(len(obstacles), len(obstacles) + len(order))):
        off = _gap(index.keys_for(j), size[j], step[j], best)
        placed.append(off)
        index.place(p, off, off + size[j])
    offsets[order] = placed
    return offsets
