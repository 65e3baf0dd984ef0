"""The exact layout model (OR-Tools CP-SAT) for one independent time component.

Buffers are rectangles in time x address: the time side is fixed (the lifetime), the address
side is a variable interval ``[offset, offset + size)``. Because the time sides are fixed
intervals, two buffers conflict exactly when both are live in one maximal cross-section (see
`intervals.py`), so the 2-D non-overlap is written as one 1-D NoOverlap per maximal
cross-section (MiniMalloc's sections): CP-SAT's NoOverlap propagators then reason about the
free room of each section (energy: the sizes live at one step must fit under the arena), which
is what closes tight instances. Each family of constraints is added by one function below.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from ortools.sat.python import cp_model

from planner.layout.intervals import maximal_cross_sections, overlapping_in_time
from planner.layout.problem import LayoutProblem
from planner.layout.reductions import push_down, stackable


@dataclass(frozen=True)
class ExactOptions:
    time_limit: float
    workers: int = 1
    seed: int = 0
    stop_at_first_solution: bool = False  # decision mode: any layout within ``upper`` will do
    formulation: str = "sections"  # "sections" (1-D NoOverlap per cross-section) or "2d"
    gravity: bool = False  # every buffer rests on the base or on a conflicting buffer
    search: str = "auto"
    extra_params: tuple = ()
    order_seed: int | None = None  # "auto" or "bottom_left" (fixed search: lowest offset first)


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
    offset: dict[int, cp_model.LinearExpr]
    var: dict[int, cp_model.IntVar]  # offset = step * var
    interval: dict[int, cp_model.IntervalVar]
    arena: cp_model.IntVar


def _add_offset_variables(
    m: _Model, problem: LayoutProblem, members: np.ndarray, base: int, upper: int
) -> None:
    """Offset_i in [base, upper - size_i], a multiple of the buffer's alignment step.

    OLLA eq. (8) ``A_e + S_e <= peak_mem`` with the arena ``upper`` as the static bound.
    """
    for i in members.tolist():
        size, step = int(problem.size[i]), int(problem.step[i])
        lo = -(-base // step)
        hi = (upper - size) // step
        var = m.model.new_int_var(lo, hi, f"off_{i}")
        expr: cp_model.LinearExpr = var if step == 1 else step * var
        m.var[i] = var
        m.offset[i] = expr
        m.interval[i] = m.model.new_fixed_size_interval_var(expr, size, f"addr_{i}")


def _add_obstacles(m: _Model, problem: LayoutProblem, obstacles: np.ndarray) -> None:
    """Pre-placed buffers as constant address intervals."""
    for j in obstacles.tolist():
        m.interval[j] = m.model.new_fixed_size_interval_var(
            int(problem.fixed_off[j]), int(problem.size[j]), f"fixed_{j}"
        )


def _add_cross_section_no_overlap(
    m: _Model, problem: LayoutProblem, members: np.ndarray, obstacles: np.ndarray
) -> int:
    """OLLA eqs. (6)-(7): buffers live at the same step get disjoint addresses, written as one
    NoOverlap over the address intervals of each maximal cross-section. Returns their count."""
    everyone = np.concatenate((members, obstacles))
    count = 0
    for section in maximal_cross_sections(problem.lower, problem.upper, everyone):
        if len(section) < 2 or all(problem.fixed[i] for i in section):
            continue
        m.model.add_no_overlap([m.interval[i] for i in section])
        count += 1
    return count


def _add_no_overlap_2d(
    m: _Model, problem: LayoutProblem, members: np.ndarray, obstacles: np.ndarray
) -> None:
    """OLLA eqs. (6)-(7) as one NoOverlap2D: fixed time intervals x variable address intervals."""
    everyone = np.concatenate((members, obstacles)).tolist()
    times = [
        m.model.new_fixed_size_interval_var(
            int(problem.lower[i]), int(problem.upper[i] - problem.lower[i]), f"time_{i}"
        )
        for i in everyone
    ]
    m.model.add_no_overlap_2d(times, [m.interval[i] for i in everyone])


def _add_arena_bound(m: _Model, problem: LayoutProblem, members: np.ndarray) -> None:
    """OLLA eq. (8): every buffer ends below the arena size (the objective)."""
    for i in members.tolist():
        m.model.add(m.offset[i] + int(problem.size[i]) <= m.arena)


def _conflicts(
    problem: LayoutProblem, members: np.ndarray, obstacles: np.ndarray
) -> dict[int, set[int]]:
    """For each member, the buffers (members and obstacles) it shares a step with."""
    everyone = np.concatenate((members, obstacles))
    out: dict[int, set[int]] = {i: set() for i in members.tolist()}
    for section in maximal_cross_sections(problem.lower, problem.upper, everyone):
        for i in section:
            if i in out:
                out[i].update(section)
    for i, found in out.items():
        found.discard(i)
    return out


def _add_gravity(
    m: _Model, problem: LayoutProblem, members: np.ndarray, obstacles: np.ndarray
) -> None:
    """Canonical (pushed-down) layouts only: each buffer lies at the base or right on top of a
    buffer it conflicts with (MiniMalloc's canonical solutions). Any layout can be pushed down
    until this holds without growing the arena, so no arena is lost. Needs alignment step 1."""
    base = problem.zone_top
    for i, below in _conflicts(problem, members, obstacles).items():
        if int(problem.step[i]) != 1:
            continue
        options = []
        on_base = m.model.new_bool_var(f"base_{i}")
        m.model.add(m.offset[i] == base).only_enforce_if(on_base)
        options.append(on_base)
        for j in sorted(below):
            lit = m.model.new_bool_var(f"on_{i}_{j}")
            if problem.fixed[j]:
                end = int(problem.fixed_off[j] + problem.size[j])
                m.model.add(m.offset[i] == end).only_enforce_if(lit)
            else:
                m.model.add(m.offset[i] == m.offset[j] + int(problem.size[j])).only_enforce_if(lit)
            options.append(lit)
        m.model.add_bool_or(options)


def _add_stacked_floor(m: _Model, problem: LayoutProblem, stacked: list[int]) -> None:
    """Buffers live during the whole component sit at the bottom, stacked (see reductions.py)."""
    top = problem.zone_top
    for i in stacked:
        m.model.add(m.offset[i] == top)
        top += int(problem.size[i])


def _identical_groups(problem: LayoutProblem, members: np.ndarray) -> list[list[int]]:
    """Groups of interchangeable buffers (same lifetime, size and alignment), by index."""
    groups: dict[tuple[int, int, int, int], list[int]] = {}
    for i in members.tolist():
        key = (int(problem.lower[i]), int(problem.upper[i]), int(problem.size[i]),
               int(problem.step[i]))
        groups.setdefault(key, []).append(i)
    return [g for g in groups.values() if len(g) > 1]


def _add_symmetry_breaking(m: _Model, groups: list[list[int]]) -> None:
    """Interchangeable buffers conflict with each other; order them by offset (any layout can be
    relabelled to satisfy this, so no arena is lost)."""
    for group in groups:
        for a, b in zip(group, group[1:], strict=False):
            m.model.add(m.offset[a] < m.offset[b])


def _symmetric_hint(
    hint: dict[int, int], groups: list[list[int]]
) -> dict[int, int]:
    """The hint relabelled inside each group of identical buffers to satisfy the ordering."""
    hint = dict(hint)
    for group in groups:
        for i, off in zip(group, sorted(hint[i] for i in group), strict=True):
            hint[i] = off
    return hint


def _add_hint(m: _Model, problem: LayoutProblem, hint: dict[int, int], arena: int) -> None:
    for i, off in hint.items():
        m.model.add_hint(m.var[i], off // int(problem.step[i]))
    m.model.add_hint(m.arena, arena)


def _add_bottom_left_search(
    m: _Model, problem: LayoutProblem, members: np.ndarray, order_seed: int | None
) -> None:
    """Branch on the buffer whose lowest possible offset is lowest (ties: longer lifetime, larger
    size), placing it there first: the canonical bottom-left search of MiniMalloc."""
    duration = problem.upper - problem.lower
    if order_seed is None:
        order = members[np.lexsort((members, -problem.size[members], -duration[members]))]
    else:
        order = np.random.default_rng(order_seed).permutation(members)
    m.model.add_decision_strategy(
        [m.var[i] for i in order.tolist()], cp_model.CHOOSE_LOWEST_MIN, cp_model.SELECT_MIN_VALUE
    )


def solve_component(
    problem: LayoutProblem,
    members: np.ndarray,
    *,
    floor: int,
    upper: int,
    hint: dict[int, int] | None,
    options: ExactOptions,
) -> ExactResult:
    """Minimize the arena of one component's free buffers ``members`` within ``[floor, upper]``.

    ``floor``: no need to go lower (the search stops, proven, when the arena reaches it);
    ``upper``: the arena must not exceed it (a capacity, or the warm start's arena);
    ``hint``: offsets (units) of a layout within ``upper``, used as the warm start.
    With ``stop_at_first_solution`` the search stops at the first layout within ``upper``.
    """
    span_lo = int(problem.lower[members].min())
    span_hi = int(problem.upper[members].max())
    obstacles = overlapping_in_time(
        problem.lower, problem.upper, problem.obstacle_idx, span_lo, span_hi
    )
    model = cp_model.CpModel()
    floor = min(floor, upper)
    m = _Model(model, {}, {}, {}, model.new_int_var(floor, upper, "arena"))
    _add_offset_variables(m, problem, members, problem.zone_top, upper)
    _add_obstacles(m, problem, obstacles)
    if options.formulation == "2d":
        _add_no_overlap_2d(m, problem, members, obstacles)
    else:
        _add_cross_section_no_overlap(m, problem, members, obstacles)
    _add_arena_bound(m, problem, members)
    if options.gravity:
        _add_gravity(m, problem, members, obstacles)
    stacked = stackable(problem, members, obstacles)
    _add_stacked_floor(m, problem, stacked)
    groups = _identical_groups(problem, members[~np.isin(members, stacked)])
    _add_symmetry_breaking(m, groups)
    if hint is not None:
        sym = _symmetric_hint(push_down(problem, hint, stacked), groups)
        hint_arena = max(
            [floor] + [sym[i] + int(problem.size[i]) for i in members.tolist()]
        )
        _add_hint(m, problem, sym, min(max(hint_arena, floor), upper))
    if not options.stop_at_first_solution:
        model.minimize(m.arena)
    if options.search in ("bottom_left", "bottom_left_fixed"):
        _add_bottom_left_search(m, problem, members, options.order_seed)

    solver = cp_model.CpSolver()
    params = solver.parameters
    params.num_workers = max(1, int(options.workers))
    params.random_seed = int(options.seed)
    params.max_time_in_seconds = max(0.01, float(options.time_limit))
    if params.num_workers > 1:
        params.interleave_search = True  # deterministic with several workers
    if options.stop_at_first_solution:
        params.stop_after_first_solution = True
    if options.search == "bottom_left_fixed":
        params.search_branching = cp_model.FIXED_SEARCH
    for key, value in options.extra_params:
        setattr(params, key, value)
    code = solver.solve(model)
    seconds = solver.wall_time
    if code in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        offsets = {i: int(solver.value(m.var[i])) * int(problem.step[i]) for i in members.tolist()}
        arena = max(offsets[i] + int(problem.size[i]) for i in offsets)
        bound = 0
        if not options.stop_at_first_solution:
            raw = int(np.ceil(solver.best_objective_bound - 1e-6))
            bound = raw if raw > floor else 0
        optimal = arena <= floor or (code == cp_model.OPTIMAL and not options.stop_at_first_solution)
        status = "OPTIMAL" if optimal else "FEASIBLE"
        timed_out = not optimal and not options.stop_at_first_solution
        return ExactResult(status, offsets, arena, bound, seconds, timed_out)
    if code == cp_model.INFEASIBLE:
        return ExactResult("INFEASIBLE", {}, None, upper + 1, seconds, False)
    return ExactResult("UNKNOWN", {}, None, 0, seconds, True)
