"""Canonical bottom-left search: a layout of one time component under a capacity, or None.

Ideas from MiniMalloc (Moffitt, ASPLOS 2023), written anew for this instance format:
- canonical placements: every layout can be pushed down until each buffer rests on a buffer
  below it (or on the floor), and then built bottom-up. The search keeps, per section (the time
  between two consecutive lifetime ends of the component; every buffer covers a run of them), the
  *floor*: the top of what was placed there. It always works at the lowest floor (leftmost on
  ties), section ``s``: the buffers that can sit exactly there are the unplaced ones whose
  lifetime starts at ``s`` and whose sections all have that floor (any buffer reaching further
  left would cross a higher section, since ``s`` is the leftmost lowest).
- cross-section inference: in every section, floor + the sizes of its unplaced buffers must stay
  within the capacity. Placing a buffer keeps this sum; only leaving room empty (raising a
  floor) can break it, so sections whose live bytes equal the capacity never waste a byte.
- forced moves and dominance: when no buffer can sit at the lowest floor, the floor rises to the
  lowest place anything can still go (no choice); buffers with the same lifetime end, size and
  alignment are interchangeable, so only the first of them is tried at a node.
- backjumping: a dead end depends only on the sections its checks read; the search returns to
  the last move that changed one of them (see `canonical_layout`).

With ``Member.infer`` (the wide portfolio, for whole components without a hot window; three to
five times the cost of a move, so the hot window's searches on real traces go without):
- unallocated floors (MiniMalloc's section inference with the floors of the unplaced buffers):
  an unplaced buffer cannot sit below the highest floor among its sections, so in every section
  the unplaced buffers sit at or above the lowest of those; if that lowest place plus their
  sizes exceeds the capacity, the node is a dead end (`_State.dead_end`). Exact: it only reads
  what the floors already forbid.
- exact tiling of basins: a plateau of equal floors with higher floors (or nothing left) on
  both sides, where no section has slack, must have its bottom covered, section after section,
  by buffers sitting right on it and lying inside it: a chain of unplaced buffers whose
  lifetimes tile the plateau exactly. No chain, dead end (exact, `_State.untileable`).
- fail first: the node works at the basin with the fewest buffers that can sit on it (one: a
  forced move) when that is fewer than at the lowest floor. Exact: as at the lowest floor,
  whatever covers a basin's left end sits on it and starts there (`_State.pick`).
Measured on the tight synthetic instances and dropped, for no gain: backjumping over whole
subtrees with the sections of every dead end below (bit masks), memoizing failed states (the
placed set and the floors), a subset-sum check at each step of the floors, a chain tiling the
top of the arena, and a search by time instead of by height (exact tiling of the room each
step frees).

Depth-first under a node budget, in both directions of time and with several orders of the
buffers that start together (`canonical_portfolio`): on the tight synthetic instances of the
layout bench the search either finds a layout within a few thousand moves or wanders for
hundreds of thousands, and which order finds it in few moves varies from one instance to the
next (heavy tails), so short runs of several orders beat one long run. When
buffers could sit at the lowest floor but all of them led to dead ends, leaving that floor
empty raises it to the next height around it, which is not exhaustive: the search finds
layouts, it never proves that none exists (the CP-SAT model does, planner.layout.exact).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from planner.layout.instance import LayoutInstance

_INF = np.iinfo(np.int64).max // 4
# Inference (`Member.infer`) costs time in proportion to the (section, buffer) pairs of the
# component, the sum of its buffers' lifetimes in sections, both to prepare and at every node:
# a 20,000-op chain's eviction schedule (24,422 buffers over 38,840 sections, 76.7 million
# pairs) took 14 s to prepare and 0.29 s a node, so a search given 0.1 s ran 98 s. A search
# with inference starts only when the time left covers its preparation at this many seconds a
# pair (measured 0.18 us), and checks the clock at every node.
_INFER_SECONDS_PER_PAIR = 2e-7
# the directions of time the search runs in (the portfolio of dives): a layout of the instance
# with time reversed is a layout of the instance (the same buffers are live together), and the
# bottom-left construction may go through from one end of a training step and not the other
# (reversed first: it went through on more of the real traces measured, in fewer moves)
DIRECTIONS = ("reversed", "forward")


# orders of the buffers that start in one section (the candidates' order): longest lifetime
# first (nested forward/backward lifetimes stack as a pyramid, real traces), largest area, largest
# size, shortest lifetime; each then by the other keys and input order
ORDERS = ("longest", "area", "largest", "shortest")


@dataclass(frozen=True)
class Member:
    """One run of the search: its direction of time, its order (`ORDERS`) and whether it
    uses the inference of `_State.dead_end` and `_State.pick` (``infer``)."""

    direction: str
    order: str = "longest"
    infer: bool = False


# the members tried on a component in turn. The default: both directions, longest first, no
# inference (the hot window's searches on real traces: the inference costs three to five times
# the moves' time there, and with it two real traces and the rematerialization traces missed
# layouts that the plain search finds within their time). The wide portfolio, for a whole
# component without a hot window (the tight synthetic instances): every order in both
# directions with the inference, forward and the area order first (the first to find a layout
# most often on those instances)
DEFAULT_PORTFOLIO = tuple(Member(direction) for direction in DIRECTIONS)
WIDE_PORTFOLIO = tuple(Member(direction, order, infer=True)
                       for direction in ("forward", "reversed")
                       for order in ("area", "longest", "largest", "shortest"))


@dataclass(frozen=True)
class _Sections:
    """The component's buffers in section coordinates."""

    members: np.ndarray  # buffer indices (instance)
    first: list[int]  # first section of each member (position in ``members``)
    end: list[int]  # one past the last section
    size: list[int]
    step: list[int]
    starting: list[list[int]]  # per section: members starting there, in candidate order
    load: np.ndarray  # per section: the sizes of the members covering it


def _sections(instance: LayoutInstance, members: np.ndarray, direction: str,
              order: str = "longest") -> _Sections:
    lower, upper = instance.lower[members], instance.upper[members]
    if direction == "reversed":
        lower, upper = -upper, -lower
    times = np.unique(np.concatenate((lower, upper)))
    first = np.searchsorted(times, lower)
    end = np.searchsorted(times, upper)
    size = instance.size[members]
    k = len(times) - 1
    delta = np.zeros(k + 1, dtype=np.int64)
    np.add.at(delta, first, size)
    np.add.at(delta, end, -size)
    load = np.cumsum(delta)[:k]
    index, length = np.arange(len(members)), upper - lower
    keys = {"longest": (index, -size, -length), "area": (index, -length, -size * length),
            "largest": (index, -length, -size), "shortest": (index, -size, length)}[order]
    ranked = np.lexsort((*keys, first))
    starting: list[list[int]] = [[] for _ in range(k)]
    for j in ranked.tolist():
        starting[int(first[j])].append(j)
    return _Sections(members, first.tolist(), end.tolist(), size.tolist(),
                     instance.step[members].tolist(), starting, load)


def _align(value: int, step: int) -> int:
    return -(-value // step) * step


class _State:
    """Floors, remaining loads and the undo log of one search."""

    def __init__(self, sec: _Sections, base: int, capacity: int, infer: bool = True):
        self.sec = sec
        self.capacity = capacity
        self.rem = sec.load.copy()
        # the floor of each section where buffers remain to be placed (else "infinite")
        self.eff = np.where(self.rem > 0, base, _INF).astype(np.int64)
        n = len(sec.members)
        self.placed = [False] * n
        self.placed_arr = np.zeros(n, dtype=bool)
        self.offset = [0] * len(sec.members)
        self.left = len(sec.members)
        self.why = [0, 0]  # the sections the current node's checks read (backjumping)
        if infer:  # O(sum of lifetimes in sections): only for the searches that use them
            self._prepare_inference()

    def _prepare_inference(self) -> None:
        sec, n = self.sec, len(self.sec.members)
        self.first = np.asarray(sec.first, dtype=np.int64)
        self.end = np.asarray(sec.end, dtype=np.int64)
        self.steps = np.asarray(sec.step, dtype=np.int64)
        # each buffer's [first, end) side by side, for one reduceat over all of them
        self.bounds = np.stack((self.first, self.end), axis=1).ravel()
        # the buffers covering each section, grouped by section (for one reduceat)
        spans = self.end - self.first
        owner = np.repeat(np.arange(n), spans)
        into = np.arange(int(spans.sum())) - np.repeat(np.cumsum(spans) - spans, spans)
        covered = self.first[owner] + into
        by_section = np.argsort(covered, kind="stable")
        self.cover = owner[by_section]
        self.cover_start = np.searchsorted(covered[by_section], np.arange(len(sec.load)))
        # the lowest offset each buffer can take as things stand (`dead_end`), unplaced ones
        self.low = np.zeros(n, dtype=np.int64)

    def note(self, a: int, b: int) -> None:
        self.why[0] = min(self.why[0], a)
        self.why[1] = max(self.why[1], b)

    def lowest(self) -> int:
        return int(np.argmin(self.eff))

    def dead_end(self) -> bool:
        """The unallocated floors or an untileable basin show that nothing fits (module
        docstring); otherwise ``low`` holds each unplaced buffer's lowest offset."""
        low = np.maximum.reduceat(np.append(self.eff, 0), self.bounds)[0::2]
        low = -(-low // self.steps) * self.steps
        low[self.placed_arr] = _INF
        self.low = low
        floor = np.minimum.reduceat(low[self.cover], self.cover_start)
        if np.any((floor + self.rem > self.capacity) & (self.rem > 0)):
            return True
        return self.untileable()

    def _basins(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Plateaus of equal floors, as (starts, ends, is a basin): higher floors or nothing
        left on both sides, and no slack in any of its sections."""
        eff = self.eff
        k = len(eff)
        change = np.flatnonzero(eff[1:] != eff[:-1]) + 1
        starts = np.concatenate(([0], change))
        ends = np.concatenate((change, [k]))
        level = eff[starts]
        left = np.concatenate(([_INF], eff[starts[1:] - 1]))
        right = np.concatenate((eff[ends[:-1]], [_INF]))
        full = np.minimum.reduceat((eff + self.rem == self.capacity).astype(np.int8), starts)
        return starts, ends, (level < _INF) & (left > level) & (right > level) & (full > 0)

    def _sitting(self) -> np.ndarray:
        """Unplaced buffers that can sit on the floor of their first section now."""
        return ~self.placed_arr & (self.low == self.eff[self.first])

    def untileable(self) -> bool:
        """A basin whose bottom no chain of buffers sitting on it tiles (module docstring)."""
        starts, ends, basin = self._basins()
        if not basin.any():
            return False
        run = np.repeat(np.arange(len(starts)), ends - starts)
        inside = self._sitting() & basin[run[self.first]] & (run[self.first] == run[self.end - 1])
        nxt: dict[int, list[int]] = {}
        for j in np.flatnonzero(inside).tolist():
            nxt.setdefault(int(self.first[j]), []).append(int(self.end[j]))
        for a, b in zip(starts[basin].tolist(), ends[basin].tolist(), strict=True):
            reach = {a}
            for u in range(a, b):
                if u in reach:
                    reach.update(nxt.get(u, ()))
            if b not in reach:
                return True
        return False

    def pick(self) -> int:
        """The section to work at: the lowest (leftmost), or the left end of a basin where
        fewer buffers can sit (after `dead_end`)."""
        lowest = int(np.argmin(self.eff))
        starts, _, basin = self._basins()
        if not basin.any():
            return lowest
        sitting = self._sitting()
        counts = np.bincount(self.first[sitting], minlength=len(self.eff))
        left = starts[basin]
        best = int(left[np.lexsort((left, self.eff[left], counts[left]))[0]])
        return best if counts[best] < counts[lowest] else lowest

    def fits_at(self, j: int, level: int) -> bool:
        sec = self.sec
        if level % sec.step[j]:
            return False
        return int(self.eff[sec.first[j]:sec.end[j]].max()) == level

    def place(self, j: int, level: int) -> None:
        sec = self.sec
        a, b, s = sec.first[j], sec.end[j], sec.size[j]
        self.placed[j] = True
        self.placed_arr[j] = True
        self.left -= 1
        self.offset[j] = level
        self.rem[a:b] -= s
        self.eff[a:b] = np.where(self.rem[a:b] > 0, level + s, _INF)

    def unplace(self, j: int, level: int) -> None:
        sec = self.sec
        a, b, s = sec.first[j], sec.end[j], sec.size[j]
        self.placed[j] = False
        self.placed_arr[j] = False
        self.left += 1
        self.rem[a:b] += s
        self.eff[a:b] = level

    def raise_to(self, s: int, level: int) -> bool:
        """Leave section ``s`` empty up to ``level``; False if its buffers no longer fit."""
        self.eff[s] = level
        return level + int(self.rem[s]) <= self.capacity

    def lower_back(self, s: int, level: int, end: int | None = None) -> None:
        self.eff[s:s + 1 if end is None else end] = level

    def raise_run(self, s: int, level: int, target: int) -> int:
        """After section ``s - 1`` rose from ``level`` to ``target``: raise the run of sections
        from ``s`` at ``level`` where no unplaced buffer starts, each to ``target``; one past
        the run, or -1 (nothing raised) if one of them no longer fits its buffers.

        One move for what would be one forced move per section: each such section would be the
        lowest next, with nothing to place, rising to its left neighbour's new floor. On buffer
        traces of thousands of steps, most of them start nothing, and these moves were 96% of
        the search."""
        sec, end = self.sec, s
        while (end < len(self.eff) and int(self.eff[end]) == level
               and all(self.placed[j] for j in sec.starting[end])):
            if target + int(self.rem[end]) > self.capacity:
                return -1
            end += 1
        self.eff[s:end] = target
        return end

    def next_level(self, s: int, level: int, forced: bool) -> int:
        """Where section ``s`` rises when nothing sits at ``level`` there: the lowest offset a
        buffer starting at ``s`` can still take, or the left neighbour's floor (buffers coming
        from the left). Not forced (buffers could sit at ``level`` but were refused): also the
        next higher floor to the right."""
        best = min(self.left_floor(s), self.lowest_start(s, level))
        if not forced:
            right = self.eff[s + 1:]
            higher = np.flatnonzero(right > level)
            if len(higher):
                best = min(best, int(right[higher[0]]))
                self.note(s, s + 2 + int(higher[0]))
            else:
                self.note(s, len(self.eff))
        return best

    def left_floor(self, s: int) -> int:
        return int(self.eff[s - 1]) if s > 0 else _INF

    def lowest_start(self, s: int, level: int) -> int:
        """The lowest offset above ``level`` that an unplaced buffer starting at ``s`` can take
        as things stand (those that could sit at ``level`` were refused there)."""
        sec = self.sec
        best = _INF
        for j in sec.starting[s]:
            if not self.placed[j]:
                at = _align(max(int(self.eff[sec.first[j]:sec.end[j]].max()), level),
                            sec.step[j])
                if at > level:
                    best = min(best, at)
        return best


def _candidates(state: _State, s: int, level: int) -> list[int]:
    """Unplaced buffers that can sit at ``level`` starting at section ``s``, one per class of
    interchangeable buffers (same end, size and alignment)."""
    sec = state.sec
    seen: set[tuple[int, int, int]] = set()
    out = []
    state.why = [max(0, s - 1), s + 1]
    for j in sec.starting[s]:
        if state.placed[j]:
            continue
        state.note(s, sec.end[j])
        key = (sec.end[j], sec.size[j], sec.step[j])
        if key in seen:
            continue
        seen.add(key)
        if state.fits_at(j, level):
            out.append(j)
    return out


class _Frame:
    """One node: the lowest section, its level, the buffers that can sit there, the move taken
    (``k`` placements tried; ``raised`` once the floor was left empty instead, up to section
    ``run_end``: `_State.raise_run`)."""

    __slots__ = ("section", "level", "cands", "k", "raised", "run_end")

    def __init__(self, section: int, level: int, cands: list[int]):
        self.section, self.level, self.cands = section, level, cands
        self.k = 0
        self.raised = False
        self.run_end = section + 1

    def touched(self, sec: _Sections) -> tuple[int, int]:
        """The sections the current move changed."""
        if self.raised:
            return self.section, self.run_end
        j = self.cands[self.k - 1]
        return sec.first[j], sec.end[j]

    def undo(self, state: _State) -> None:
        if self.raised:
            state.lower_back(self.section, self.level, self.run_end)
        elif self.k:
            state.unplace(self.cands[self.k - 1], self.level)

    def advance(self, state: _State) -> bool:
        """Undo the current move and take the next one; False when none is left."""
        self.undo(state)
        if self.raised:
            self.raised = False
            return False
        if self.k < len(self.cands):
            state.place(self.cands[self.k], self.level)
            self.k += 1
            return True
        self.k = 0
        target = state.next_level(self.section, self.level, forced=not self.cands)
        if target >= _INF or not state.raise_to(self.section, target):
            state.lower_back(self.section, self.level)
            return False
        self.run_end = state.raise_run(self.section + 1, self.level, target)
        if self.run_end < 0:
            # a section of the run is the dead end: the search goes back move by move, as it
            # would from that section's own node (which reads it and its left neighbour)
            state.lower_back(self.section, self.level)
            self.run_end = self.section + 1
            state.why = [0, len(state.eff)]
            return False
        self.raised = True
        return True


def canonical_layout(
    instance: LayoutInstance, members: np.ndarray, *, capacity: int, direction: str,
    node_limit: int, deadline: float, order: str = "longest", infer: bool = False,
) -> tuple[dict[int, int] | None, bool]:
    """Offsets (units) for the free buffers ``members`` (one time component, no pre-placed
    buffers among or around them) with every end at most ``capacity``, or None if the search
    found none within ``node_limit`` moves or by ``deadline`` (``time.perf_counter()``); and
    whether the search tree was exhausted (in this direction of time).

    ``order``: the candidates' order (`ORDERS`). With ``infer``, a node that the unallocated
    floors or an untileable basin show dead (`_State.dead_end`) is one because of the last
    move (the node before it passed the same checks). A node with no move at all is a dead end
    caused by the last moves that changed the sections its checks read (``state.why``: the
    left neighbour and the sections of the buffers starting there); the search jumps back to
    the latest of those, undoing the moves in between without trying their alternatives: those
    moves never touched these sections, and until one of them is touched the same dead end
    recurs.
    """
    sec = _sections(instance, members, direction, order)
    if instance.zone_top + int(sec.load.max(initial=0)) > capacity:
        return None, True
    if infer:
        pairs = sum(sec.end) - sum(sec.first)
        if time.perf_counter() + pairs * _INFER_SECONDS_PER_PAIR > deadline:
            return None, False
    state = _State(sec, instance.zone_top, capacity, infer)
    stack: list[_Frame] = []
    nodes = 0
    every = 1 if infer else 256  # nodes between looks at the clock (see _INFER_SECONDS_PER_PAIR)
    while state.left:
        nodes += 1
        if nodes > node_limit or (nodes % every == 0 and time.perf_counter() > deadline):
            return None, False
        if infer and state.dead_end():
            if not stack:
                return None, True
            state.why = list(stack[-1].touched(sec))  # the last move made it one
        else:
            s = state.pick() if infer else state.lowest()
            level = int(state.eff[s])
            frame = _Frame(s, level, _candidates(state, s, level))
            if frame.advance(state):
                stack.append(frame)
                continue
        lo, hi = state.why
        while stack:
            a, b = stack[-1].touched(sec)
            if a < hi and b > lo:
                break
            stack.pop().undo(state)
        while stack and not stack[-1].advance(state):
            stack.pop()
        if not stack:
            return None, True
    return {int(i): off for i, off in zip(sec.members.tolist(), state.offset, strict=True)}, False


def canonical_portfolio(
    instance: LayoutInstance, members: np.ndarray, *, capacity: int, node_budget: int,
    deadline: float, portfolio: tuple[Member, ...] = DEFAULT_PORTFOLIO,
) -> dict[int, int] | None:
    """`canonical_layout` for each member of ``portfolio`` in turn
    (``node_budget`` moves each) until one finds a layout, so that the outcome does not depend
    on the machine's speed unless ``deadline`` (wall clock, a safety net) cuts it short."""
    for member in portfolio:
        if time.perf_counter() > deadline:
            break
        found, _ = canonical_layout(instance, members, capacity=capacity,
                                    direction=member.direction, node_limit=node_budget,
                                    deadline=deadline, order=member.order, infer=member.infer)
        if found is not None:
            return found
    return None
