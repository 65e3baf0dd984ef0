"""Exact reasoning where a component fills the capacity: glue buffers that must touch.

At a time ``t`` where the sections on both sides are full (live bytes plus the zones equal the
capacity), the buffers that end at ``t`` and those that start at ``t`` occupy exactly the same
addresses: an address used by an ending buffer is used right after ``t`` (the section is full)
by a buffer that cannot have been live before ``t`` (it would overlap the ending one), and
conversely. Any valid input with such times has this property, whatever produced it; it holds
in every layout within the capacity, so what follows loses no layout:

- one buffer ends and one starts at ``t``: they have the same size (the loads are equal) and the
  same offset, so they are glued into one buffer over both lifetimes;
- the ending buffers occupy one interval (one starts, or no proper part of the ending ones has
  the size of a proper part of the starting ones, so their addresses cannot split into several
  intervals): if they also share one lifetime, they are one block of any internal order (nothing
  else is live inside it while they are), glued into one buffer; likewise the starting ones.

Gluing repeats until nothing changes (a glued buffer can make another time's ends or starts
single). What is left: the reduced instance (fewer buffers, the same layouts), and each full
time's ending and starting buffers (`Boundary`), for the CP-SAT model's redundant constraints
(planner.layout.exact: the two sides share their lowest and highest address, and one interval
holds both where it is known to be one).

On the tight synthetic instances of the layout bench (a rectangle cut into pieces, every step
full) a third to a half of the buffers are glued away and CP-SAT decides what is left in a
fraction of the time it needs on the buffers as given; on real traces, times with both sides
at the peak are few and this changes little.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from planner.layout.instance import LayoutInstance

# the most buffers on one side of a time for which the subset sums are enumerated (2 ** this
# many sums); a side with more is not shown to be one interval
_MAX_SIDE = 12


@dataclass(frozen=True)
class Boundary:
    """A time with full sections on both sides: the (reduced) buffers ending and starting
    there occupy the same addresses; ``contiguous``: those addresses are one interval."""

    ending: tuple[int, ...]
    starting: tuple[int, ...]
    contiguous: bool


@dataclass(frozen=True)
class Tiling:
    """The component with its glued buffers: ``instance`` holds one free buffer per block
    (``members``: all of them), ``parts`` each block's original buffers with their offsets
    inside it, ``boundaries`` the full times."""

    instance: LayoutInstance
    members: np.ndarray
    parts: tuple[tuple[tuple[int, int], ...], ...]
    boundaries: tuple[Boundary, ...]
    full_share: float  # the share of the component's inner times that are full

    def expand(self, offsets: dict[int, int]) -> dict[int, int]:
        """Offsets of the original buffers from offsets of the blocks."""
        return {i: offsets[b] + rel for b, parts in enumerate(self.parts) for i, rel in parts}


def _sums(sizes: list[int]) -> set[int]:
    sums = {0}
    for s in sizes:
        sums |= {x + s for x in sums}
    return sums


def one_interval(ending: list[int], starting: list[int]) -> bool:
    """Whether buffers of these sizes, ending and starting at a full time, must occupy one
    interval: no proper part of one side has the total size of a proper part of the other
    (each interval of their addresses would be one)."""
    if len(ending) == 1 or len(starting) == 1:
        return True
    if max(len(ending), len(starting)) > _MAX_SIDE:
        return False
    total = sum(ending)
    common = _sums(ending) & _sums(starting)
    return all(x in (0, total) for x in common)


@dataclass
class _Blocks:
    """Blocks being glued, indexed by the times they end and start at."""

    lower: list[int] = field(default_factory=list)
    upper: list[int] = field(default_factory=list)
    size: list[int] = field(default_factory=list)
    step: list[int] = field(default_factory=list)
    parts: list[list[tuple[int, int]]] = field(default_factory=list)
    alive: set[int] = field(default_factory=set)
    ends: defaultdict[int, set[int]] = field(default_factory=lambda: defaultdict(set))
    starts: defaultdict[int, set[int]] = field(default_factory=lambda: defaultdict(set))

    def add(self, lower: int, upper: int, size: int, step: int,
            parts: list[tuple[int, int]]) -> None:
        b = len(self.lower)
        self.lower.append(lower)
        self.upper.append(upper)
        self.size.append(size)
        self.step.append(step)
        self.parts.append(parts)
        self.alive.add(b)
        self.ends[upper].add(b)
        self.starts[lower].add(b)

    def remove(self, b: int) -> None:
        self.alive.discard(b)
        self.ends[self.upper[b]].discard(b)
        self.starts[self.lower[b]].discard(b)

    def join(self, first: int, second: int) -> None:
        """``second`` starts where ``first`` ends, at the same offset."""
        self.remove(first)
        self.remove(second)
        self.add(self.lower[first], self.upper[second], self.size[first],
                 max(self.step[first], self.step[second]),
                 self.parts[first] + self.parts[second])

    def stack(self, side: list[int]) -> bool:
        """Glue blocks of one lifetime that occupy one interval into one block (any order);
        False where their alignments would depend on the order."""
        step = max(self.step[b] for b in side)
        if any(self.size[b] % step for b in side):
            return False
        parts: list[tuple[int, int]] = []
        top = 0
        for b in sorted(side):
            parts += [(i, rel + top) for i, rel in self.parts[b]]
            top += self.size[b]
            self.remove(b)
        self.add(self.lower[side[0]], self.upper[side[0]], top, step, parts)
        return True


def _glue_at(blocks: _Blocks, t: int) -> list[int]:
    """Glue what the full time ``t`` forces; the times whose ends or starts changed."""
    ending, starting = sorted(blocks.ends[t]), sorted(blocks.starts[t])
    if not ending or not starting:
        return []
    if len(ending) == 1 and len(starting) == 1:
        first, second = ending[0], starting[0]
        if blocks.size[first] != blocks.size[second]:
            return []  # the sections are not both full after all (cannot happen): no gluing
        blocks.join(first, second)
        return [blocks.lower[first], blocks.upper[second]]
    if not one_interval([blocks.size[b] for b in ending], [blocks.size[b] for b in starting]):
        return []
    for side in (ending, starting):
        lifetimes = {(blocks.lower[b], blocks.upper[b]) for b in side}
        if len(side) > 1 and len(lifetimes) == 1 and blocks.stack(side):
            (lower, upper), = lifetimes
            return [lower, upper]
    return []


def _full_times(instance: LayoutInstance, members: np.ndarray,
                capacity: int) -> tuple[set[int], int]:
    """Times with a full section on both sides (a component has none before its first
    start or after its last end), and the number of inner times."""
    lower, upper = instance.lower[members], instance.upper[members]
    times = np.unique(np.concatenate((lower, upper)))
    delta = np.zeros(len(times), dtype=np.int64)
    np.add.at(delta, np.searchsorted(times, lower), instance.size[members])
    np.add.at(delta, np.searchsorted(times, upper), -instance.size[members])
    full = np.cumsum(delta)[:-1] + instance.zone_top == capacity
    return set(times[1:-1][full[:-1] & full[1:]].tolist()), max(0, len(times) - 2)


def reduce_tiling(instance: LayoutInstance, members: np.ndarray,
                  capacity: int) -> Tiling | None:
    """The component ``members`` (free buffers, nothing pre-placed around them) glued at its
    full times under ``capacity`` (units); None when it has none."""
    full, inner = _full_times(instance, members, capacity)
    if not full:
        return None
    blocks = _Blocks()
    for i in members.tolist():
        blocks.add(int(instance.lower[i]), int(instance.upper[i]), int(instance.size[i]),
                   int(instance.step[i]), [(i, 0)])
    pending = sorted(full)
    while pending:
        t = pending.pop()
        changed = _glue_at(blocks, t)
        if changed:
            pending.append(t)
            pending += [u for u in changed if u in full]
    order = sorted(blocks.alive)
    index = {b: k for k, b in enumerate(order)}
    n = len(order)
    reduced = LayoutInstance(
        ids=tuple(f"block{k}" for k in range(n)),
        lower=np.asarray([blocks.lower[b] for b in order], dtype=np.int64),
        upper=np.asarray([blocks.upper[b] for b in order], dtype=np.int64),
        size=np.asarray([blocks.size[b] for b in order], dtype=np.int64),
        step=np.asarray([blocks.step[b] for b in order], dtype=np.int64),
        fixed=np.zeros(n, dtype=bool), fixed_off=np.full(n, -1, dtype=np.int64),
        in_zone=np.zeros(n, dtype=bool), zone_top=instance.zone_top, unit=instance.unit,
    )
    boundaries = []
    for t in sorted(full):
        ending = sorted(index[b] for b in blocks.ends[t])
        starting = sorted(index[b] for b in blocks.starts[t])
        if ending and starting:
            contiguous = one_interval([int(reduced.size[b]) for b in ending],
                                      [int(reduced.size[b]) for b in starting])
            boundaries.append(Boundary(tuple(ending), tuple(starting), contiguous))
    return Tiling(reduced, np.arange(n), tuple(tuple(blocks.parts[b]) for b in order),
                  tuple(boundaries), len(full) / inner)
