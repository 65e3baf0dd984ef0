"""Use the budget: drop the recomputations a schedule can afford to keep instead.

A schedule that recomputes while budget is left unused is not finished. Dropping a
recomputation of op k at step i keeps k's previous materialization alive instead, from the end of
its storage's live range (or from the first write over it in place, which now needs bytes of its
own) up to step i; from step i on the bytes were live anyway. That gap is the memory cost of the
drop (a first-order estimate: it ignores that the inputs k no longer reads may die earlier, which
only helps, and how storage sharing shifts around the kept value, which the exact replay below
judges), and the op's time is what it saves.

`fill_budget` ranks every recomputation by seconds saved per byte kept, accepts greedily while
the estimated live-bytes curve (numpy, per device) stays within the budget over the gap, then
rebuilds the schedule (dead recomputations of the dropped ones' inputs go too:
planner.memory.schedule.drop_dead_recomputations) and replays it exactly. When the replay
overshoots, the longest prefix of the accepted drops that fits is found by bisection. Rounds
repeat on the new schedule until nothing more fits or the deadline comes. Every schedule it
returns was replayed within the budgets: the pass never makes a schedule slower or over budget.

No step starts that its last duration (`Pace`) says cannot end by the deadline: a round of
GPT-2-small (a replay, then an attempt: rebuilding and simulating the schedule) takes 0.15-0.3 s,
and a round started just before the deadline made its 5 s requests 0.3 s late.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from planner.ir.aliasing import VIEW_OPS
from planner.ir.graph import Graph
from planner.memory.replay import Replay, replay
from planner.memory.schedule import (
    Compute,
    Event,
    Free,
    Schedule,
    drop_dead_recomputations,
    free_after_last_read,
)
from planner.memory.simulate import ScheduleStats, simulate
from planner.memory.zones import buffer_bytes
from planner.profile.costs import CostTable

# An attempt (rebuilding the schedule, then simulating it) lasts about this many replays of the
# schedule before one is timed (GPT-2-small: attempts of 0.12-0.16 s, replays of 0.08 s).
ATTEMPT_REPLAYS = 2.0


@dataclass(frozen=True)
class Drop:
    """Dropping the recomputation at `event` (an index into the schedule's events)."""

    event: int
    device: str
    first: int  # inclusive steps over which the previous materialization now stays live
    last: int
    nbytes: int
    seconds: float

    @property
    def worth(self) -> float:
        """Seconds saved per byte kept: the knapsack ratio, since the budget bounds the bytes at
        the peak (whatever the gap's length, once it crosses the peak)."""
        return self.seconds / max(self.nbytes, 1)


@dataclass
class Pace:
    """How long the fill's steps last on one graph (0: not timed yet). The fills of one search
    share it (their schedules are of similar length): a step is started only when its expected
    duration ends before the deadline."""

    replay_s: float = 0.0
    attempt_s: float = 0.0

    def attempt(self) -> float:
        """An attempt's expected seconds: the last one's, else ATTEMPT_REPLAYS replays."""
        return self.attempt_s or ATTEMPT_REPLAYS * self.replay_s

    def round_fits(self, deadline: float) -> bool:
        """Whether a round (a replay, then at least one attempt) started now ends in time."""
        return _ends_before(self.replay_s + self.attempt(), deadline)

    def attempt_fits(self, deadline: float) -> bool:
        return _ends_before(self.attempt(), deadline)


@dataclass(frozen=True)
class Filled:
    schedule: Schedule
    stats: ScheduleStats
    rounds: int
    dropped: int  # recomputations dropped (their dead inputs' recomputations not counted)


def fill_budget(graph: Graph, schedule: Schedule, stats: ScheduleStats,
                budgets: Mapping[str, int], costs: CostTable, *, alignment: int,
                deadline: float, start_by: float | None = None, pace: Pace | None = None
                ) -> Filled:
    """`schedule` with as many recomputations dropped as fit `budgets` (see the module doc).

    `stats` is the schedule's replay (simulate with `costs` and `alignment`); the result is
    never slower and always within the budgets when `schedule` is. No step starts that `pace`
    (the durations timed by earlier fills of this graph, updated with this one's) says cannot
    end before `deadline`, and no round or bisection step after `start_by` (the deadline by
    default; earlier for one of several fills sharing the time)."""
    pace = pace or Pace()
    start_by = deadline if start_by is None else min(start_by, deadline)
    best = Filled(schedule, stats, 0, 0)
    refused: set[tuple[int, int]] = set()  # (op, how many times it ran before): drops that broke
    while time.perf_counter() < start_by and pace.round_fits(deadline):
        started = time.perf_counter()
        walk = replay(graph, best.schedule)
        # A schedule just simulated replays at once (the walk kept): no measure of the next.
        pace.replay_s = max(pace.replay_s, time.perf_counter() - started)
        names = _identities(best.schedule.events)
        drops = [d for d in _drops(walk, costs, alignment) if names[d.event] not in refused]
        accepted = _accept(drops, walk, budgets, alignment)
        if not accepted or not pace.attempt_fits(deadline):
            return best
        fitted = _longest_fitting(graph, best.schedule, accepted, budgets, costs, alignment,
                                  (start_by, deadline), pace)
        count = fitted[0] if fitted is not None else 0
        if count < len(accepted):
            refused.add(names[accepted[count].event])
        if fitted is None:
            continue
        filled = fitted[1]
        if filled.stats.seconds is not None and best.stats.seconds is not None \
                and filled.stats.seconds >= best.stats.seconds:
            return best
        best = Filled(filled.schedule, filled.stats, best.rounds + 1, best.dropped + count)
    return best


def _drops(walk: Replay, costs: CostTable, alignment: int) -> list[Drop]:
    """Every recomputation whose outputs have an earlier materialization on its device."""
    history = walk.final()
    drops = []
    for index, (event, io) in enumerate(zip(walk.schedule.events, walk.events, strict=True)):
        if not (isinstance(event, Compute) and event.recompute):
            continue
        if walk.graph.ops[event.op].op_type in VIEW_OPS:
            continue  # costs nothing; its source's recomputation is the one worth dropping
        first, last, nbytes = index, -1, 0
        for m in io.writes:
            if m is None:
                continue
            if m.ordinal == 0:
                break  # no earlier materialization here to keep
            previous = history[(m.tensor, m.device)][m.ordinal - 1]
            owner = previous.owner
            # Kept, it ends its storage's in-place reuse too: what was written over it needs
            # bytes of its own from then on.
            reused = [w.first for w in walk.members[owner]
                      if w.shares == "in_place" and w.first > previous.first]
            start = min(reused) if reused else walk.storage_range(owner)[1] + 1
            first, last = min(first, start), max(last, index - 1)
            nbytes += buffer_bytes(walk.graph.tensors[owner.tensor].nbytes, alignment)
        else:
            if last >= first:
                drops.append(Drop(index, event.device, first, last, nbytes,
                                  costs.op_seconds[event.op][event.device]))
    drops.sort(key=lambda d: -d.worth)
    return drops


def _accept(drops: Sequence[Drop], walk: Replay, budgets: Mapping[str, int],
            alignment: int) -> list[Drop]:
    """The drops, best first, that keep the estimated live bytes within the budgets."""
    curves = {d: np.asarray(c, dtype=np.int64) for d, c in walk.live_bytes(alignment).items()}
    accepted = []
    for drop in drops:
        curve = curves.get(drop.device)
        if curve is None:
            continue
        window = curve[drop.first:drop.last + 1]
        if int(window.max()) + drop.nbytes <= budgets[drop.device]:
            window += drop.nbytes
            accepted.append(drop)
    return accepted


def _longest_fitting(graph: Graph, schedule: Schedule, accepted: Sequence[Drop],
                     budgets: Mapping[str, int], costs: CostTable, alignment: int,
                     until: tuple[float, float], pace: Pace) -> tuple[int, Filled] | None:
    """(k, schedule) for the largest k such that dropping accepted[:k] replays within the
    budgets, by bisection (all of them first: the caller saw it fit); None when not even the
    first one fits. `until`: fill_budget's (start_by, deadline) for the bisection's steps."""

    def attempt(k: int) -> Filled | None:
        started = time.perf_counter()
        dropped = {d.event for d in accepted[:k]}
        kept: list[Event] = [e for i, e in enumerate(schedule.events)
                             if i not in dropped and not isinstance(e, Free)]
        live = drop_dead_recomputations(graph, kept, schedule.home)
        rebuilt = Schedule(tuple(free_after_last_read(graph, live, schedule.home)),
                           schedule.home)
        stats = simulate(graph, rebuilt, costs, alignment=alignment)
        pace.attempt_s = time.perf_counter() - started
        return Filled(rebuilt, stats, 0, k) if stats.fits(dict(budgets)) else None

    whole = attempt(len(accepted))
    if whole is not None:
        return len(accepted), whole
    low, high, found = 0, len(accepted), None  # accepted[:low] fits; accepted[:high] does not
    start_by, deadline = until
    while high - low > 1 and time.perf_counter() < start_by and pace.attempt_fits(deadline):
        middle = (low + high) // 2
        result = attempt(middle)
        if result is not None:
            low, found = middle, result
        else:
            high = middle
    return (low, found) if found is not None else None


def _identities(events: Sequence[Event]) -> dict[int, tuple[int, int]]:
    """Each compute event named across rounds (indices shift as drops are made): its op and how
    many times the op ran before it."""
    runs: dict[int, int] = {}
    names = {}
    for index, event in enumerate(events):
        if isinstance(event, Compute):
            names[index] = (event.op, runs.get(event.op, 0))
            runs[event.op] = runs.get(event.op, 0) + 1
    return names


def _ends_before(seconds: float, deadline: float) -> bool:
    return time.perf_counter() + seconds < deadline
