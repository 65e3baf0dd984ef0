"""`plan_layout`: the one entry point that chooses between the heuristics and the exact model.

1. Validate and normalize (zones placed, pre-placed buffers checked, common unit).
2. Lower bound: max live bytes. Stack always-live buffers at the bottom (no loss).
3. Heuristics (pyramid, greedy by size, best fit, greedy by area, pyramids) stop at the first
   that reaches the lower bound: that layout is optimal and is returned at once.
4. Otherwise, per independent time component, hardest first: first the decision "does the
   component fit in the lowest arena still worth having", by the hot window (window.py: the
   steps near the peak laid out first, the rest around them; real training traces, and proofs
   on the window alone), the canonical search over the whole component (canonical.py, never a
   proof; without a hot window, its wide portfolio: every order in both directions of time,
   with its exact inference, short runs first) and then CP-SAT (fast on tight instances, and
   the proofs), then, if not shown, CP-SAT's minimization warm-started from the best layout.
   A component with a hot window (a real trace) instead approaches the goal by windows at
   arenas between it and the layout at hand, and stops there within `_WINDOWED_SECONDS`: a
   plan's layout is not worth more. With a capacity, the decision at the capacity only.
The best layout found is always returned, with the best proven bound, its gap and status.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from planner.errors import InfeasibleError, InvalidInputError
from planner.layout.bands import band_layout
from planner.layout.bounds import live_bound_units
from planner.layout.canonical import DIRECTIONS, WIDE_PORTFOLIO, canonical_portfolio
from planner.layout.checker import check_layout
from planner.layout.exact import ExactOptions, decide_component, minimize_component
from planner.layout.heuristics import HEURISTICS, run_heuristics
from planner.layout.instance import LayoutInstance, arena_units, build_instance
from planner.layout.intervals import time_components
from planner.layout.reductions import stack_always_live
from planner.layout.tiling import Tiling, reduce_tiling
from planner.layout.types import (
    DEFAULT_ALIGNMENT,
    STATUS_FEASIBLE,
    STATUS_OPTIMAL,
    Buffer,
    Layout,
)
from planner.layout.window import window_layout

# share of a component's time budget given to the decision at the floor before minimizing
_DECISION_SHARE = 0.5
# the hot window's share of the decision's time (it gives up at once where it does not apply)
_WINDOW_SHARE = 0.3
# where the decision at the goal was not shown: the share of the component's remaining time
# spent bisecting the arena by the hot window (_approach), and its most steps
_APPROACH_SHARE = 0.6
_APPROACH_STEPS = 6
# minimizing: the share of window.py's canonical moves the windows get in the approach (where
# they get no CP-SAT) and at the goal (with the canonical search over the whole component:
# every window or component it solved on the real traces took at most 6 moves a buffer), and
# the seconds a component with a hot window gets after the heuristics (the rematerialization
# traces measured found their best layouts within 1.5 s, and on keep-everything traces the
# windows reach the bound within 1 s)
_QUICK_EFFORT = 0.5
_GOAL_EFFORT = 0.2
_WINDOWED_SECONDS = 1.6
# ... of which the windows at the goal and the canonical search over the whole component get
# at most these shares (the rest is the approach's)
_QUICK_GOAL_WINDOWS = 0.3
_QUICK_GOAL_WHOLE = 0.15
# the canonical search's moves per direction of time before CP-SAT: a base plus some per buffer
# (10-20 us a move here: 0.1 s plus 1-2 ms per buffer in all; the real traces it solves took up
# to 57 moves per buffer, the tight synthetic instances it solves under 2,000 moves, and CP-SAT
# closes the others), cut short at this share of the component's time
_CANONICAL_BASE_NODES = 5_000
_CANONICAL_NODES_PER_BUFFER = 60
_CANONICAL_SHARE = 0.3
# the first round of the wide portfolio gets this fraction of each member's moves
_CANONICAL_ROUND = 4
# a component with at least this share of full times (tiling.py) skips the canonical search:
# on the tight synthetic instances (every time full) CP-SAT on the glued buffers with their
# boundary constraints decides most within 0.5 s where the canonical search wanders for seconds
# or finds nothing; such a component is split into bands first (bands.py: each part glued and
# given a short CP-SAT turn, split again if undecided) for this share of its time, then CP-SAT
# decides the whole glued component with the rest (the proof, where there is none)
_TILED_SHARE = 0.5
_BANDS_SHARE = 0.5


@dataclass
class _Search:
    """The state of the exact phase: the layout so far and what is proven."""

    instance: LayoutInstance
    offsets: np.ndarray  # units, every buffer
    bound: int  # units, proven lower bound on the whole arena
    deadline: float
    workers: int
    seed: int
    timed_out: bool = False
    # components brought under their goal, by the method that did it (the one reported)
    solved_by: Counter[str] = field(default_factory=Counter)
    # components with a hot window (by their first buffer): real traces, laid out by windows
    windowed: set[int] = field(default_factory=set)

    def remaining(self) -> float:
        return self.deadline - time.perf_counter()

    def options(self, seconds: float) -> ExactOptions:
        return ExactOptions(time_limit=max(0.05, seconds), workers=self.workers, seed=self.seed)

    def component_arena(self, members: np.ndarray) -> int:
        return int((self.offsets[members] + self.instance.size[members]).max())

    def accept(self, offsets: dict[int, int]) -> None:
        for i, off in offsets.items():
            self.offsets[i] = off


def _components_by_difficulty(search: _Search, above: int) -> list[np.ndarray]:
    """Components whose current arena exceeds ``above``, highest arena (then largest) first."""
    p = search.instance
    comps = [c for c in time_components(p.lower, p.upper, p.free_idx)
             if search.component_arena(c) > above]
    return sorted(comps, key=lambda c: (-search.component_arena(c), -len(c), int(c[0])))


def _share(search: _Search, comp: np.ndarray, pending: list[np.ndarray]) -> float:
    """This component's share of the remaining time, by its number of buffers."""
    return search.remaining() * len(comp) / max(1, sum(len(c) for c in pending))


def _canonical_rounds(instance: LayoutInstance, comp: np.ndarray, goal: int, nodes: int,
                      deadline: float) -> dict[int, int] | None:
    """The canonical search over the whole component: every member of the wide portfolio
    (canonical.py) with a short budget, then again with a longer one; ``nodes`` moves per
    direction of time in all, as one long run each had before. On the tight synthetic
    instances a member finds a layout within a few thousand moves or not at all, and which
    member varies (heavy tails): short runs of all of them first."""
    share = nodes * len(DIRECTIONS) // len(WIDE_PORTFOLIO)
    for budget in (share // _CANONICAL_ROUND, share):
        found = canonical_portfolio(instance, comp, capacity=goal, node_budget=budget,
                                    deadline=deadline, portfolio=WIDE_PORTFOLIO)
        if found is not None or time.perf_counter() > deadline:
            return found
    return None


def _decide(search: _Search, comp: np.ndarray, goal: int, seconds: float,
            quick: bool = False) -> str:
    """Bring ``comp`` under ``goal``: "FIT", "INFEASIBLE" (proven) or "UNKNOWN". The hot
    window first (window.py: real traces, whose peak is short; its proofs are a window's), then
    the canonical search over the whole component or, where most times are full, the split
    into bands (bands.py; neither is a proof), then CP-SAT with the rest.

    ``quick`` (minimizing): the windows and the canonical search get part of its moves (on the
    real traces measured every window solved took at most 6 moves per buffer), and a
    component with a hot window (noted in ``search.windowed``) skips CP-SAT: on traces of
    thousands of buffers its decision never came back in the seconds it was given."""
    started = time.perf_counter()
    tiling: Tiling | None = None
    instance, members = search.instance, comp
    method = "canonical"
    if not len(search.instance.obstacle_idx):
        window_seconds = seconds * _WINDOW_SHARE
        if quick:
            window_seconds = min(window_seconds, _QUICK_GOAL_WINDOWS * _WINDOWED_SECONDS)
        windowed = window_layout(search.instance, comp, capacity=goal,
                                 deadline=started + window_seconds,
                                 options=search.options(seconds),
                                 effort=_GOAL_EFFORT if quick else 1.0)
        if windowed.status == "FIT":
            search.accept(windowed.offsets)
            search.solved_by["hot_window"] += 1
            return "FIT"
        if windowed.status == "INFEASIBLE":
            return "INFEASIBLE"
        if quick and windowed.windows:
            search.windowed.add(int(comp[0]))
        seconds -= time.perf_counter() - started
        started = time.perf_counter()
        canonical_seconds = seconds * _CANONICAL_SHARE
        if int(comp[0]) in search.windowed:
            nodes = _CANONICAL_BASE_NODES + _CANONICAL_NODES_PER_BUFFER * len(comp)
            canonical_seconds = min(canonical_seconds, _QUICK_GOAL_WHOLE * _WINDOWED_SECONDS)
            found = canonical_portfolio(search.instance, comp, capacity=goal,
                                        node_budget=int(nodes * _GOAL_EFFORT),
                                        deadline=started + canonical_seconds)
            if found is None:
                return "UNKNOWN"
        else:
            tiling = reduce_tiling(search.instance, comp, goal)
            instance, members = (tiling.instance, tiling.members) if tiling else (search.instance,
                                                                                  comp)
            if tiling is None or tiling.full_share < _TILED_SHARE:
                nodes = _CANONICAL_BASE_NODES + _CANONICAL_NODES_PER_BUFFER * len(members)
                found = _canonical_rounds(instance, members, goal, nodes,
                                          started + canonical_seconds)
                if found is not None and tiling is not None:
                    found = tiling.expand(found)
            else:
                banded = band_layout(search.instance, comp, goal,
                                     started + seconds * _BANDS_SHARE)
                found = banded.offsets if banded else None
                method = "bands" if banded and banded.splits else "cpsat"
        if found is not None:
            search.accept(found)
            search.solved_by[method] += 1
            return "FIT"
        seconds -= time.perf_counter() - started
    if search.remaining() <= 0:
        # Building the model alone outlasts any deadline on long traces (the 20,000-op chain's
        # 24,422 buffers: over a second), and it would get CP-SAT's least time to no purpose.
        return "UNKNOWN"
    result = decide_component(instance, members, upper=goal, options=search.options(seconds),
                              boundaries=tiling.boundaries if tiling else ())
    if result.arena is not None:
        search.accept(tiling.expand(result.offsets) if tiling else result.offsets)
        search.solved_by["cpsat"] += 1
        return "FIT"
    return result.status


def _approach(search: _Search, comp: np.ndarray, goal: int, seconds: float) -> int:
    """Where the decision at ``goal`` was not shown: search the arena between ``goal`` and the
    current one by the hot window, keeping every layout it finds; returns the floor this leaves
    (above ``goal`` only where a window proved that the arena below it is out of reach). Each
    probe goes a third of the way down from the last one that did not prove its capacity out
    of reach (or from the layout it found).

    On buffer traces of rematerialization schedules (live bytes within 1% of the peak for a
    thousand steps) neither the window nor CP-SAT settles the bound, but windows of a layout a
    few tenths of a percent above it go through where the heuristics leave more (GPT-2-small
    with Adam: 0.41% above the live bytes, pyramids 0.68%).

    Where no window applies at a capacity (no step is hot under it, or the hot steps hold most
    of the component), the canonical search over the whole component tries it (its two
    directions, then the wide portfolio's rounds, with part of their moves). On a
    ResNet-18-narrow schedule at persistent + 30% of its activations (742 buffers, live bytes
    within 3% of the peak for only 90 of 3,746 steps) every window probe gave up and greedy by
    size's 7.0% above the live bytes stood; the canonical search finds 4.0% in 0.1 s. Where a
    window was tried, the windows keep the time: given to the canonical search too, it left
    the UNet-Adam trace below without the window at 0.9% that fits."""
    lo, floor = goal, goal
    top = search.component_arena(comp)  # probes go below it: the arena at hand, or lower
    deadline = time.perf_counter() + seconds
    for _ in range(_APPROACH_STEPS):
        left = deadline - time.perf_counter()
        if top - lo <= 1 or left <= 0:
            break
        mid = top - (top - lo) // 3  # nearer the layout at hand: likelier, and cheaper, to fit
        windowed = window_layout(search.instance, comp, capacity=mid,
                                 deadline=time.perf_counter() + left / 2,
                                 options=search.options(left / 2), effort=_QUICK_EFFORT,
                                 cpsat=False)
        if windowed.status == "UNKNOWN" and not windowed.windows:
            nodes = _CANONICAL_BASE_NODES + _CANONICAL_NODES_PER_BUFFER * len(comp)
            left = deadline - time.perf_counter()
            found = (canonical_portfolio(search.instance, comp, capacity=mid,
                                         node_budget=int(nodes * _QUICK_EFFORT),
                                         deadline=time.perf_counter() + left / 4)
                     or _canonical_rounds(search.instance, comp, mid,
                                          int(nodes * _QUICK_EFFORT),
                                          time.perf_counter() + left / 4))
            if found is not None:
                search.accept(found)
                search.solved_by["canonical"] += 1
                top = search.component_arena(comp)
                continue
        if windowed.status == "FIT":
            search.accept(windowed.offsets)
            search.solved_by["hot_window"] += 1
            top = search.component_arena(comp)
        elif windowed.status == "INFEASIBLE":
            lo = floor = mid + 1
            search.bound = max(search.bound, floor)
        else:
            # Nothing shown at this capacity; a lower one is not harder for the windows: either
            # no step is hot under this one (the heuristics' arena far above the live bytes:
            # UNet-Adam's filled remat schedule, pyramid 16.7% above, a window fitting 0.001%
            # above), or a hot window holds most of the component, where the small windows of
            # a tighter capacity go through (another UNet-Adam schedule: the window at 5.6%
            # above its live bytes gave up, the one at 0.9% fit 0.001% above them, and
            # probing upwards from there left greedy-by-size's 8.6%). The next probe goes lower.
            top = mid
    return floor


def _minimize(search: _Search) -> None:
    """Lower the arena as far as proven possible within the deadline (no capacity).

    Per component, hardest first: decide at the goal (the proven bound, or the arena another
    component already needs); if that is not shown, approach it by the hot window
    (`_approach`), then minimize from the current layout. A component with a hot window stops
    there, at most `_WINDOWED_SECONDS` after its decision began: on real traces CP-SAT's
    minimization never improved the layout (rematerialization traces spent 6 s of a plan's
    layout for nothing). The goal only rises: a component below the arena of another one
    needs no further work.
    """
    achieved = search.bound
    comps = _components_by_difficulty(search, search.bound)
    for k, comp in enumerate(comps):
        current = search.component_arena(comp)
        goal = max(search.bound, achieved)
        if current <= goal:
            continue
        if search.remaining() <= 0:
            search.timed_out = True
            achieved = max(achieved, current)
            continue
        started = time.perf_counter()
        outcome = _decide(search, comp, goal, _share(search, comp, comps[k:]) * _DECISION_SHARE,
                          quick=True)
        if outcome == "FIT":
            continue
        floor = goal
        windowed = int(comp[0]) in search.windowed
        if outcome == "INFEASIBLE":
            floor = goal + 1
            search.bound = max(search.bound, floor)
        elif not len(search.instance.obstacle_idx):
            seconds = _share(search, comp, comps[k:]) * _APPROACH_SHARE
            if windowed:
                seconds = min(seconds, started + _WINDOWED_SECONDS - time.perf_counter())
            floor = _approach(search, comp, goal, seconds)
            current = search.component_arena(comp)
        if windowed:
            search.timed_out = search.timed_out or search.remaining() <= 0
        elif floor < current and search.remaining() > 0:
            hint = {i: int(search.offsets[i]) for i in comp.tolist()}
            second = minimize_component(search.instance, comp, floor=floor, upper=current,
                                        hint=hint,
                                        options=search.options(_share(search, comp, comps[k:])))
            if second.arena is not None and second.arena < current:
                search.accept(second.offsets)
                current = second.arena
            search.bound = max(search.bound, second.bound)
            if second.status != "OPTIMAL":
                search.timed_out = True
        elif floor < current:
            search.timed_out = True
        achieved = max(achieved, current)


def _fit_capacity(search: _Search, cap: int) -> str:
    """Make every component fit under ``cap``: "FIT", "INFEASIBLE" (proven) or "UNKNOWN"."""
    comps = _components_by_difficulty(search, cap)
    outcome = "FIT"
    for k, comp in enumerate(comps):
        if search.remaining() <= 0:
            search.timed_out = True
            return "UNKNOWN"
        result = _decide(search, comp, cap, _share(search, comp, comps[k:]))
        if result == "INFEASIBLE":
            search.bound = max(search.bound, cap + 1)
            return "INFEASIBLE"
        if result == "UNKNOWN":
            search.timed_out = True
            outcome = "UNKNOWN"
    return outcome


def _layout(
    instance: LayoutInstance, offsets: np.ndarray, bound: int, live: int, method: str,
    started: float, timed_out: bool,
) -> Layout:
    arena = arena_units(instance, offsets)
    bound = min(bound, arena)
    u = instance.unit
    return Layout(
        offsets={bid: int(off) * u
                 for bid, off in zip(instance.ids, offsets.tolist(), strict=True)},
        arena_size=arena * u,
        lower_bound=bound * u,
        status=STATUS_OPTIMAL if arena <= bound else STATUS_FEASIBLE,
        method=method,
        solve_seconds=time.perf_counter() - started,
        timed_out=timed_out and arena > bound,
        live_bytes_bound=live * u,
    )


def _check_arguments(capacity: int | None, time_limit: float, workers: int) -> None:
    if capacity is not None and (isinstance(capacity, bool) or not isinstance(capacity, int)
                                 or capacity < 0):
        raise InvalidInputError(f"capacity {capacity!r} must be a non-negative integer (bytes)")
    if not time_limit > 0:
        raise InvalidInputError(f"time limit {time_limit!r} must be positive (seconds)")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise InvalidInputError(f"workers {workers!r} must be a positive integer")


def plan_layout(
    buffers: Sequence[Buffer],
    *,
    alignment: int = DEFAULT_ALIGNMENT,
    capacity: int | None = None,
    time_limit: float = 10.0,
    workers: int = 1,
    seed: int = 0,
    known: Mapping[str, int] | None = None,
) -> Layout:
    """Offsets for ``buffers`` in one arena, as small as proven possible within ``time_limit``.

    With ``capacity`` (bytes), any layout within it is returned as soon as one is found, and
    InfeasibleError is raised when none exists (``smallest_feasible`` = the smallest arena found
    and proven minimal, else a proven lower bound with ``is_lower_bound``) or none was found in
    time. Deterministic for the same input, seed and worker count: inside the search, budgets
    are CP-SAT deterministic time; only a search cut short by the wall-clock ``time_limit``
    (``timed_out``), or heuristics cut short by it on instances so large that they take longer,
    can end differently on a busier machine. Several workers run CP-SAT's
    interleaved (deterministic) parallel search. Raises InvalidInputError for invalid buffers
    or arguments.

    ``known``: offsets a layout of these buffers had before (planner.remat.remembered: the
    smallest plan named in a refusal). When they lay the buffers out validly within
    ``capacity``, they are the answer, searched no further: a request for the arena a refusal
    named gets that arena whatever time it has left (GPT-2-small's smallest plan laid out at
    1,824,774,080 B with 2 s, and at 1,829,924,800 B with the 0.3 s the request for that budget
    had left).
    """
    started = time.perf_counter()
    _check_arguments(capacity, time_limit, workers)
    instance = build_instance(buffers, alignment)
    u = instance.unit
    live = live_bound_units(instance)
    if known is not None and not check_layout(buffers, known, alignment) and all(
            known[bid] % u == 0 for bid in instance.ids):
        kept = np.array([known[bid] // u for bid in instance.ids], dtype=np.int64)
        if capacity is None or arena_units(instance, kept) * u <= capacity:
            return _layout(instance, kept, live, live, "known", started, False)
    reduced = stack_always_live(instance)
    results = run_heuristics(reduced, target=live, deadline=started + time_limit)
    best = results[0] if results else None
    offsets = best.offsets.copy() if best is not None else instance.fixed_off.copy()
    method = best.method if best is not None else "fixed"
    heuristic_arena = arena_units(instance, offsets)

    def done(bound: int, timed_out: bool = False, chosen: str = method,
             final: np.ndarray = offsets) -> Layout:
        return _layout(instance, final, bound, live, chosen, started, timed_out)

    cap = None if capacity is None else capacity // u
    if cap is not None and live > cap:
        raise InfeasibleError(
            f"capacity {capacity} bytes is below the {live * u} bytes that are live at one "
            f"step (sizes rounded up to alignment); it needs at least {live * u} bytes",
            smallest_feasible=live * u, is_lower_bound=heuristic_arena > live,
        )
    if heuristic_arena <= live or (cap is not None and heuristic_arena <= cap):
        return done(live)

    search = _Search(reduced, offsets.copy(), live, started + time_limit, workers, seed)

    def exact_done() -> Layout:
        improved = arena_units(instance, search.offsets) < heuristic_arena
        exact = search.solved_by.most_common(1)[0][0] if search.solved_by else "cpsat"
        return done(search.bound, search.timed_out, exact if improved else method,
                    search.offsets)

    if cap is None:
        _minimize(search)
        return exact_done()
    outcome = _fit_capacity(search, cap)
    if outcome == "FIT":
        search.timed_out = False
        return exact_done()
    if outcome == "INFEASIBLE":
        _minimize(search)  # with the remaining time: how much is needed?
        needed = arena_units(instance, search.offsets)
        exact = needed <= search.bound
        smallest = needed if exact else search.bound
        detail = "" if exact else f" (the smallest arena found is {needed * u} bytes)"
        raise InfeasibleError(
            f"no layout fits in capacity {capacity} bytes (proven by the exact solver); "
            f"{'the smallest arena is' if exact else 'at least'} {smallest * u} bytes "
            f"is needed{detail}",
            smallest_feasible=smallest * u, is_lower_bound=not exact,
        )
    found = arena_units(instance, search.offsets)
    raise InfeasibleError(
        f"no layout within capacity {capacity} bytes was found in {time_limit:g} s and none was "
        f"proven impossible (proven lower bound {search.bound * u} bytes); the smallest arena "
        f"found is {found * u} bytes: raise the capacity to that, or the time limit",
        smallest_feasible=found * u, is_lower_bound=False,
    )


def heuristic_layout(
    buffers: Sequence[Buffer],
    *,
    alignment: int = DEFAULT_ALIGNMENT,
    methods: Sequence[str] | None = None,
) -> Layout:
    """The best layout of the heuristics only (all, or the named ones; no early stop, no
    solver): a baseline for benchmarks and a fast answer where proof is not needed."""
    started = time.perf_counter()
    instance = build_instance(buffers, alignment)
    live = live_bound_units(instance)
    names = tuple(methods) if methods is not None else None
    if names is not None:
        unknown = [m for m in names if m not in HEURISTICS]
        if unknown:
            raise InvalidInputError(f"unknown heuristic(s) {unknown}; known: {list(HEURISTICS)}")
    best = run_heuristics(stack_always_live(instance), target=None, methods=names)[0]
    return _layout(instance, best.offsets, live, live, best.method, started, False)


def exact_layout(
    buffers: Sequence[Buffer],
    *,
    alignment: int = DEFAULT_ALIGNMENT,
    time_limit: float = 10.0,
    workers: int = 1,
    seed: int = 0,
) -> Layout:
    """The CP-SAT model alone: every component minimized from scratch (no warm start, no
    heuristic answer), stopping at the live-bytes bound. For tests and benchmarks."""
    started = time.perf_counter()
    _check_arguments(None, time_limit, workers)
    instance = build_instance(buffers, alignment)
    live = live_bound_units(instance)
    offsets = instance.fixed_off.copy()
    comps = time_components(instance.lower, instance.upper, instance.free_idx)
    deadline = started + time_limit
    bound, timed_out = live, False
    # no layout needs more than the zones, the pre-placed buffers and all free sizes stacked
    top = instance.zone_top
    obstacles = instance.obstacle_idx
    if len(obstacles):
        top = max(top, int((instance.fixed_off[obstacles] + instance.size[obstacles]).max()))
    pending = len(instance.free_idx)
    for comp in comps:
        seconds = max(0.05, (deadline - time.perf_counter()) * len(comp) / max(1, pending))
        pending -= len(comp)
        result = minimize_component(
            instance, comp, floor=live, upper=top + int(instance.size[comp].sum()), hint=None,
            options=ExactOptions(time_limit=seconds, workers=workers, seed=seed),
        )
        if result.arena is None:
            raise RuntimeError(f"the exact model found no layout in {seconds:.2f} s")
        for i, off in result.offsets.items():
            offsets[i] = off
        bound = max(bound, result.bound)
        timed_out = timed_out or result.timed_out
    return _layout(instance, offsets, bound, live, "cpsat", started, timed_out)
