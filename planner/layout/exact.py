"""The exact layout model (OR-Tools CP-SAT) for one independent time component.

Buffers are rectangles in time x address: the time side is fixed (the lifetime), the address
side is a variable interval ``[offset, offset + size)``. Because the time sides are fixed
intervals, two buffers conflict exactly when both are live in one maximal cross-section (see
`intervals.py`), so the 2-D non-overlap is written as one 1-D NoOverlap per maximal
cross-section (MiniMalloc's sections). CP-SAT's NoOverlap propagators then reason about the free
room of each section (the sizes live at one step must fit under the arena). When the sections
are too large in total (thousands of long-lived buffers), one NoOverlap2D is used instead.

Each family of constraints is added by one function below; OLLA's equations (Steiner et al.
2022, section 3.3) are cited where they apply. Two searches are used:
- ``decide``: is there a layout within ``upper``? A short bottom-left search first (place the
  buffer that can go lowest, at its lowest offset: MiniMalloc's canonical solutions), then
  CP-SAT's own search. This is what closes tight instances fast.
- ``minimize``: the smallest arena, warm-started from a heuristic layout (hint), the lower bound
  as the floor of the arena variable, so the search stops as soon as the floor is reached.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from planner.layout.instance import LayoutInstance
from planner.layout.intervals import maximal_cross_sections, overlapping_in_time
from planner.layout.reductions import push_down, stackable
from planner.layout.tiling import Boundary

if TYPE_CHECKING:  # OR-Tools' cp_model imports pandas (~0.6 s): imported where a model is built
    from ortools.sat.python import cp_model

# total size of all cross-sections above which one NoOverlap2D replaces them
_SECTION_BUDGET_PER_BUFFER = 40
_SECTION_BUDGET_MIN = 20_000
# decision portfolio: members run in turns; the first turn gets this much deterministic time
# (CP-SAT's unit, about 0.3 s of wall time here), each later turn twice the previous one
_PORTFOLIO = ("longest_first", "largest_first", "earliest_first", "latest_first", "cpsat")
_FIRST_TURN_DETERMINISTIC = 0.05
_MERGE_NO_OVERLAP_WORK_LIMIT = 0.0


@dataclass(frozen=True)
class ExactOptions:
    time_limit: float
    workers: int = 1
    seed: int = 0


@dataclass(frozen=True)
class ExactResult:
    status: str  # "OPTIMAL" (at or below the floor, or proven minimal), "FEASIBLE",
    # "INFEASIBLE" (no layout within ``upper``), "UNKNOWN" (stopped before an answer)
    offsets: dict[int, int]  # buffer index -> offset (units), for the component's free buffers
    arena: int | None  # units: highest end among the component's buffers, None if no solution
    bound: int  # units: a proven lower bound above ``floor`` on the component's arena, else 0
    seconds: float
    timed_out: bool


@dataclass
class _Model:
    model: cp_model.CpModel
    var: dict[int, cp_model.IntVar]  # offset_i = step_i * var_i
    offset: dict[int, cp_model.LinearExprT]
    interval: dict[int, cp_model.IntervalVar]
    arena: cp_model.IntVar


def _add_offset_variables(
    m: _Model, instance: LayoutInstance, members: np.ndarray, upper: int
) -> None:
    """A_i in [zone_top, upper - S_i], a multiple of the buffer's alignment step (OLLA's
    address variable A_e, with the arena ``upper`` as the static bound of eq. (8))."""
    base = instance.zone_top
    for i in members.tolist():
        size, step = int(instance.size[i]), int(instance.step[i])
        lo, hi = -(-base // step), (upper - size) // step
        var = m.model.new_int_var(lo, max(lo, hi), f"off_{i}")
        if hi < lo:  # does not fit under ``upper`` at all: an infeasible model, not an invalid one
            m.model.add(var <= hi)
        m.var[i] = var
        m.offset[i] = var if step == 1 else step * var
        m.interval[i] = m.model.new_fixed_size_interval_var(m.offset[i], size, f"addr_{i}")


def _add_obstacles(m: _Model, instance: LayoutInstance, obstacles: np.ndarray) -> None:
    """Pre-placed buffers: constant address intervals."""
    for j in obstacles.tolist():
        m.interval[j] = m.model.new_fixed_size_interval_var(
            int(instance.fixed_off[j]), int(instance.size[j]), f"fixed_{j}"
        )


def _add_cross_section_no_overlap(
    m: _Model, instance: LayoutInstance, sections: list[list[int]]
) -> None:
    """OLLA eqs. (6)-(7a)-(7b): tensors live at the same step get disjoint addresses; one
    NoOverlap over the address intervals of each maximal cross-section."""
    for section in sections:
        if len(section) > 1 and not all(instance.fixed[i] for i in section):
            m.model.add_no_overlap([m.interval[i] for i in section])


def _add_no_overlap_2d(m: _Model, instance: LayoutInstance, everyone: np.ndarray) -> None:
    """OLLA eqs. (6)-(7a)-(7b) as one NoOverlap2D: fixed lifetimes x variable addresses."""
    times = [
        m.model.new_fixed_size_interval_var(
            int(instance.lower[i]), int(instance.upper[i] - instance.lower[i]), f"time_{i}"
        )
        for i in everyone.tolist()
    ]
    m.model.add_no_overlap_2d(times, [m.interval[i] for i in everyone.tolist()])


def _add_arena_bound(m: _Model, instance: LayoutInstance, members: np.ndarray) -> None:
    """OLLA eq. (8): A_e + S_e <= peak_mem (the arena variable)."""
    for i in members.tolist():
        m.model.add(m.offset[i] + int(instance.size[i]) <= m.arena)


def _add_stacked_floor(m: _Model, instance: LayoutInstance, stacked: list[int]) -> None:
    """Buffers live during the whole component sit at the bottom, stacked (reductions.py)."""
    top = instance.zone_top
    for i in stacked:
        m.model.add(m.offset[i] == top)
        top += int(instance.size[i])


def _add_boundaries(m: _Model, instance: LayoutInstance, boundaries: Sequence[Boundary],
                    upper: int) -> None:
    """Redundant constraints of the full times (tiling.py): the buffers ending and those
    starting there occupy the same addresses, so both sides have the same lowest and the same
    highest address; where those addresses are one interval, every buffer of both sides lies
    in it. CP-SAT's NoOverlaps imply this only through the full sections' exact fill, which
    they propagate weakly."""
    model = m.model
    for boundary in boundaries:
        sides = (boundary.ending, boundary.starting)
        if boundary.contiguous:
            total = sum(int(instance.size[b]) for b in boundary.ending)
            start = model.new_int_var(instance.zone_top, max(instance.zone_top, upper - total),
                                      "interval")
            for b in (*boundary.ending, *boundary.starting):
                model.add(m.offset[b] >= start)
                model.add(m.offset[b] + int(instance.size[b]) <= start + total)
            continue
        lows, highs = [], []
        for side in sides:
            low = model.new_int_var(instance.zone_top, upper, "low")
            model.add_min_equality(low, [m.offset[b] for b in side])
            high = model.new_int_var(instance.zone_top, upper, "high")
            model.add_max_equality(high, [m.offset[b] + int(instance.size[b]) for b in side])
            lows.append(low)
            highs.append(high)
        model.add(lows[0] == lows[1])
        model.add(highs[0] == highs[1])


def _identical_groups(instance: LayoutInstance, members: np.ndarray) -> list[list[int]]:
    """Groups of interchangeable buffers (same lifetime, size and alignment), by index."""
    groups: dict[tuple[int, int, int, int], list[int]] = {}
    for i in members.tolist():
        key = (int(instance.lower[i]), int(instance.upper[i]), int(instance.size[i]),
               int(instance.step[i]))
        groups.setdefault(key, []).append(i)
    return [g for g in groups.values() if len(g) > 1]


def _add_symmetry_breaking(m: _Model, groups: list[list[int]]) -> None:
    """Interchangeable buffers conflict with each other; order them by offset (any layout can
    be relabelled to satisfy this, so no arena is lost)."""
    for group in groups:
        for a, b in zip(group, group[1:], strict=False):
            m.model.add(m.offset[a] < m.offset[b])


def _add_hint(
    m: _Model, instance: LayoutInstance, hint: dict[int, int], stacked: list[int],
    groups: list[list[int]], floor: int, upper: int,
) -> None:
    """The warm start, rewritten to satisfy the stacking and the symmetry breaking."""
    hint = push_down(instance, hint, stacked)
    for group in groups:
        for i, off in zip(group, sorted(hint[i] for i in group), strict=True):
            hint[i] = off
    for i, off in hint.items():
        m.model.add_hint(m.var[i], off // int(instance.step[i]))
    arena = max(hint[i] + int(instance.size[i]) for i in hint)
    m.model.add_hint(m.arena, min(max(arena, floor), upper))


def _add_bottom_left_search(
    m: _Model, instance: LayoutInstance, members: np.ndarray, ties: str
) -> None:
    """Branch on the buffer that can go lowest, at its lowest offset (a canonical bottom-left
    construction); ``ties`` orders buffers that can go equally low."""
    duration = instance.upper - instance.lower
    size, lower = instance.size[members], instance.lower[members]
    keys = {
        "longest_first": (members, -size, -duration[members]),
        "largest_first": (members, -duration[members], -size),
        "earliest_first": (members, -size, lower),
        "latest_first": (members, -size, -instance.upper[members]),
    }[ties]
    from ortools.sat.python import cp_model

    order = members[np.lexsort(keys)]
    m.model.add_decision_strategy(
        [m.var[i] for i in order.tolist()], cp_model.CHOOSE_LOWEST_MIN, cp_model.SELECT_MIN_VALUE
    )


def _with_search(m: _Model, instance: LayoutInstance, members: np.ndarray, ties: str) -> _Model:
    """A copy of the model with a bottom-left decision strategy."""
    clone = m.model.clone()
    var = {i: clone.get_int_var_from_proto_index(v.index) for i, v in m.var.items()}
    copy = _Model(clone, var, {}, {}, clone.get_int_var_from_proto_index(m.arena.index))
    _add_bottom_left_search(copy, instance, members, ties)
    return copy


def _build(
    instance: LayoutInstance, members: np.ndarray, *, floor: int, upper: int,
    hint: dict[int, int] | None, minimize: bool, boundaries: Sequence[Boundary] = (),
) -> _Model:
    from ortools.sat.python import cp_model

    span_lo = int(instance.lower[members].min())
    span_hi = int(instance.upper[members].max())
    obstacles = overlapping_in_time(
        instance.lower, instance.upper, instance.obstacle_idx, span_lo, span_hi
    )
    model = cp_model.CpModel()
    m = _Model(model, {}, {}, {}, model.new_int_var(min(floor, upper), upper, "arena"))
    _add_offset_variables(m, instance, members, upper)
    _add_obstacles(m, instance, obstacles)
    everyone = np.concatenate((members, obstacles))
    budget = max(_SECTION_BUDGET_MIN, _SECTION_BUDGET_PER_BUFFER * len(everyone))
    sections = maximal_cross_sections(instance.lower, instance.upper, everyone, max_total=budget)
    if sections is None:
        _add_no_overlap_2d(m, instance, everyone)
    else:
        _add_cross_section_no_overlap(m, instance, sections)
    _add_arena_bound(m, instance, members)
    stacked = stackable(instance, members, obstacles)
    _add_stacked_floor(m, instance, stacked)
    groups = _identical_groups(instance, members[~np.isin(members, stacked)])
    _add_symmetry_breaking(m, groups)
    _add_boundaries(m, instance, boundaries, upper)
    if hint is not None:
        _add_hint(m, instance, hint, stacked, groups, floor, upper)
    if minimize:
        model.minimize(m.arena)
    return m


def _run(
    m: _Model, instance: LayoutInstance, members: np.ndarray, *, floor: int, upper: int,
    seconds: float, workers: int, seed: int, decide: bool, fixed_search: bool = False,
    deterministic: float | None = None,
) -> ExactResult:
    from ortools.sat.python import cp_model

    solver = cp_model.CpSolver()
    params = solver.parameters
    params.num_workers = max(1, workers)
    params.random_seed = seed
    params.max_time_in_seconds = max(0.01, seconds)
    if deterministic is not None:
        params.max_deterministic_time = deterministic
    if params.num_workers > 1:
        params.interleave_search = True  # deterministic with several workers
    # the presolve step that merges NoOverlaps into larger cliques takes tens of seconds on
    # thousands of sections and gains nothing here: the sections are maximal cliques already
    params.merge_no_overlap_work_limit = _MERGE_NO_OVERLAP_WORK_LIMIT
    if decide:
        params.stop_after_first_solution = True
    if fixed_search:
        params.search_branching = cp_model.FIXED_SEARCH
    code = solver.solve(m.model)
    wall = solver.wall_time
    if code in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        offsets = {i: int(solver.value(m.var[i])) * int(instance.step[i]) for i in members.tolist()}
        arena = max(offsets[i] + int(instance.size[i]) for i in offsets)
        bound = 0
        if not decide:
            raw = int(np.ceil(solver.best_objective_bound - 1e-6))
            bound = raw if raw > floor else 0
        optimal = arena <= floor or (code == cp_model.OPTIMAL and not decide)
        timed_out = not optimal and not decide
        return ExactResult("OPTIMAL" if optimal else "FEASIBLE", offsets, arena, bound, wall,
                           timed_out)
    if code == cp_model.INFEASIBLE:
        return ExactResult("INFEASIBLE", {}, None, upper + 1, wall, False)
    if code == cp_model.MODEL_INVALID:
        raise RuntimeError(f"invalid layout model: {m.model.validate()}")
    return ExactResult("UNKNOWN", {}, None, 0, wall, True)


def decide_component(
    instance: LayoutInstance, members: np.ndarray, *, upper: int, options: ExactOptions,
    boundaries: Sequence[Boundary] = (),
) -> ExactResult:
    """Find any layout of the free buffers ``members`` with every end at most ``upper``.

    "INFEASIBLE" proves that none exists (then ``bound`` = ``upper + 1``). ``boundaries``: the
    full times of the component under ``upper`` (tiling.py), as redundant constraints.
    """
    deadline = time.perf_counter() + options.time_limit
    base = _build(instance, members, floor=upper, upper=upper, hint=None, minimize=False,
                  boundaries=boundaries)
    models = {
        name: base if name == "cpsat" else _with_search(base, instance, members, name)
        for name in _PORTFOLIO
    }
    turn = _FIRST_TURN_DETERMINISTIC
    spent = 0.0
    while True:
        for name in _PORTFOLIO:
            left = deadline - time.perf_counter()
            if left <= 0:
                return ExactResult("UNKNOWN", {}, None, 0, spent, True)
            result = _run(
                models[name], instance, members, floor=upper, upper=upper, seconds=left,
                workers=options.workers if name == "cpsat" else 1, seed=options.seed,
                decide=True, fixed_search=name != "cpsat", deterministic=turn,
            )
            spent += result.seconds
            if result.status != "UNKNOWN":
                return ExactResult(result.status, result.offsets, result.arena, result.bound,
                                   spent, False)
        turn *= 2


def minimize_component(
    instance: LayoutInstance, members: np.ndarray, *, floor: int, upper: int,
    hint: dict[int, int] | None, options: ExactOptions,
) -> ExactResult:
    """Minimize the arena of the free buffers ``members`` within ``[floor, upper]``.

    ``floor``: no need to go lower (the search stops when the arena reaches it);
    ``upper``: the arena may not exceed it; ``hint``: a layout within ``upper`` (units).
    """
    m = _build(instance, members, floor=floor, upper=upper, hint=hint, minimize=True)
    return _run(m, instance, members, floor=floor, upper=upper, seconds=options.time_limit,
                workers=options.workers, seed=options.seed, decide=False)
