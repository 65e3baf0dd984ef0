"""`plan_remat`: a schedule for a graph under per-device budgets, with an honest report.

Graph + order + budgets (bytes) + costs -> the most faithful problem that fits the time limit
(planner.remat.configure) -> heuristics and CP-SAT (planner.remat.solve) -> decisions -> a
`planner.memory.schedule.Schedule` (planner.remat.emit), checked by replaying it (simulate)
against the budgets. Memory is modelled in `memory_unit`-byte units, every tensor rounded up
(the alignment of the arena), so the model never undercounts what the layout has to place.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from planner.ir.graph import Graph
from planner.memory.liveness import order_lower_bound
from planner.memory.schedule import Schedule
from planner.memory.simulate import ScheduleStats, simulate
from planner.profile.costs import CostTable
from planner.remat.configure import configure
from planner.remat.decision import Decision, evaluate
from planner.remat.emit import emit_schedule
from planner.remat.heuristics import Candidate, heuristic_candidates, replay
from planner.remat.lp_rounding import lp_rounding
from planner.remat.problem import Reduction, RematProblem
from planner.remat.solve import minimize_peak, solve_problem

# Where each phase of plan_remat must stop, as shares of its time limit: the heuristics win on
# the largest graphs, LP rounding on some mid-sized ones, CP-SAT (model build included) on the
# rest and supplies the bound.
SOLVER_SHARES = {"heuristics": 0.6, "lp_rounding": 0.75}
# Runners-up kept beside the best schedule, for when its layout fragments past a budget.
ALTERNATIVES = 8


@dataclass(frozen=True)
class RematResult:
    schedule: Schedule | None
    status: str  # OPTIMAL | FEASIBLE | INFEASIBLE | UNKNOWN (see plan_remat)
    objective_seconds: float | None  # predicted time of `schedule` (compute + copies)
    bound_seconds: float | None  # a lower bound valid for every schedule of this order
    gap: float | None  # (objective - bound) / objective
    seconds: float
    method: str  # "cpsat" or the heuristic whose schedule was kept
    tier: str  # which model (planner.remat.configure)
    memory_model: str
    reductions: tuple[Reduction, ...]
    exact_model: bool  # no reduction can cut off a better schedule of this order
    stats: ScheduleStats | None  # the replayed schedule: peaks (aligned bytes), time
    keep_all_seconds: float | None  # every op once on the home device
    model_status: str | None = None  # CP-SAT on the (possibly reduced) model
    model_objective_seconds: float | None = None
    model_bound_seconds: float | None = None  # valid for the reduced model only
    smallest_peak_bytes: int | None = None  # smallest replayed home peak the heuristics saw
    problem: RematProblem | None = None
    decision: Decision | None = None
    notes: tuple[str, ...] = ()
    model_stats: dict[str, object] = field(default_factory=dict)
    # Other schedules within the budgets, fastest first: with lower peaks, they may lay out
    # within a budget the best one's arena overshoots (planner.pipeline tries them first).
    alternatives: tuple[Candidate, ...] = ()


def plan_remat(
    graph: Graph, order: Sequence[int], budgets: Mapping[str, int], costs: CostTable, *,
    time_limit: float = 30.0, workers: int = 1, seed: int = 0, memory_unit: int = 64,
    force_tier: str | None = None, use_solver: bool = True,
) -> RematResult:
    """Best schedule within `budgets` (bytes per device) found in `time_limit` seconds.

    Heuristic schedules on the op-level problem, replayed against the true budgets, Checkmate's
    LP rounding on the chosen model, and the CP-SAT solution of that model (hinted with the best
    of them it can express; replayed too) compete; the fastest replayed schedule that fits wins.
    Status: OPTIMAL when it meets a lower bound valid for every schedule of the order (the
    model's own bound when the model is exact); INFEASIBLE when the exact model (or the
    op-footprint bound) rules the budgets out; FEASIBLE or UNKNOWN otherwise. The reduced
    model's status and bound are reported beside (`model_*`).
    """
    started = time.perf_counter()
    if len(budgets) == 1 and next(iter(budgets.values())) < order_lower_bound(graph):
        return _below_lower_bound(graph, budgets, costs, started)
    configured = configure(graph, order, costs, budgets, memory_unit=memory_unit,
                           force_tier=force_tier)
    problem, tier, memory = configured.problem, configured.tier, configured.memory
    exact = all(r.exact for r in problem.reductions)
    notes: list[str] = []
    # The time limit is shared out: heuristics, then LP rounding, then CP-SAT, each up to a
    # deadline (the heuristics' runs are a fixed list, so a run cut short is the only source of
    # irreproducibility: a slower machine tries fewer of them).
    shares = SOLVER_SHARES if use_solver else {"heuristics": 0.9}
    deadline = started + shares["heuristics"] * time_limit
    candidates, smallest = heuristic_candidates(configured.fine, budgets, costs,
                                                deadline=deadline)
    if configured.fine is not problem:
        more, small2 = heuristic_candidates(problem, budgets, costs, scan=(1.0,),
                                            actual=False, deadline=deadline)
        candidates = sorted(candidates + more, key=lambda c: c.seconds)
        if small2 is not None:
            smallest = small2 if smallest is None else min(smallest, small2)
    if use_solver and len(budgets) == 1:
        # Checkmate's LP rounding on the model's problem: another candidate, and a hint.
        lp_left = started + shares["lp_rounding"] * time_limit - time.perf_counter()
        lp = lp_rounding(problem, budgets, costs, seed=seed, time_limit=max(0.5, lp_left))
        if lp.candidate is not None and lp.candidate.stats.fits(dict(budgets)):
            candidates = sorted([*candidates, lp.candidate], key=lambda c: c.seconds)
    units = {d: b // problem.memory_unit for d, b in budgets.items()}
    hint = None
    for candidate in candidates:
        if candidate.problem is problem and evaluate(problem, candidate.decision).fits(units):
            hint = candidate.decision
            break
    solution = None
    if use_solver:
        remaining = max(0.5, time_limit - (time.perf_counter() - started))
        solution = solve_problem(problem, units, time_limit=remaining, workers=workers,
                                 seed=seed, memory=memory, hint=hint, use_heuristics=False)
        if solution.decision is not None:
            cp = replay(problem, solution.decision, costs, solution.method)
            if cp.stats.fits(dict(budgets)):
                candidates = sorted([*candidates, cp], key=lambda c: c.seconds)
            else:
                notes.append("the model's schedule replays over budget (a bug): not used")
        notes.extend(solution.notes)
    keep_all = costs.sequential_seconds(problem.home)
    lower = costs.fastest_seconds()
    model_bound = (solution.bound * problem.time_unit
                   if solution is not None and solution.bound is not None else None)
    if exact and model_bound is not None:
        lower = max(lower, model_bound)
    best = candidates[0] if candidates else None
    if best is None:
        proven = solution is not None and solution.status == "INFEASIBLE" and exact
        status = "INFEASIBLE" if proven else "UNKNOWN"
        objective = gap = None
    else:
        objective = best.seconds
        if lower - objective <= 1e-9 * lower:
            # The same op times summed in another order: equal up to rounding, never above.
            lower = min(lower, objective)
        gap = max(0.0, (objective - lower) / objective) if objective else 0.0
        status = "OPTIMAL" if gap <= 1e-9 else "FEASIBLE"
    return RematResult(
        schedule=best.schedule if best else None, status=status,
        objective_seconds=objective, bound_seconds=lower, gap=gap,
        seconds=time.perf_counter() - started, method=best.name if best else "none",
        tier=tier, memory_model=memory, reductions=problem.reductions, exact_model=exact,
        stats=best.stats if best else None, keep_all_seconds=keep_all,
        model_status=solution.status if solution else None,
        model_objective_seconds=(solution.evaluation.cost * problem.time_unit
                                 if solution is not None and solution.evaluation else None),
        model_bound_seconds=model_bound, smallest_peak_bytes=smallest,
        problem=best.problem if best else problem, decision=best.decision if best else None,
        notes=tuple(notes), model_stats=solution.stats if solution else {},
        alternatives=_lower_peaks(best, candidates[1:]),
    )


def _lower_peaks(best: Candidate | None, others: Sequence[Candidate]) -> tuple[Candidate, ...]:
    """Up to ALTERNATIVES of `others` (fastest first) whose peaks are all below `best`'s."""
    if best is None:
        return ()
    lower = [c for c in others
             if all(c.stats.peaks.get(d, 0) < peak for d, peak in best.stats.peaks.items())]
    return tuple(lower[:ALTERNATIVES])


def _below_lower_bound(graph, budgets, costs, started) -> RematResult:
    """A single budget under the op-footprint bound: proven infeasible without solving."""
    device, budget = next(iter(budgets.items()))
    lower = order_lower_bound(graph)
    return RematResult(
        schedule=None, status="INFEASIBLE", objective_seconds=None,
        bound_seconds=costs.fastest_seconds(), gap=None, seconds=time.perf_counter() - started,
        method="lower bound", tier="none", memory_model="none", reductions=(),
        exact_model=True, stats=None, keep_all_seconds=costs.sequential_seconds(device),
        notes=(f"{device}: {budget} B is below {lower} B, which some step needs whatever the "
               "order or recomputation",),
    )


@dataclass(frozen=True)
class PeakResult:
    schedule: Schedule | None
    peak_bytes: int | None  # the replayed schedule's peak (aligned)
    model_bound_bytes: int | None  # lower bound on the reduced model's smallest peak
    status: str
    seconds: float
    tier: str


def smallest_peak(graph: Graph, order: Sequence[int], device: str, costs: CostTable, *,
                  time_limit: float = 30.0, workers: int = 1, seed: int = 0,
                  memory_unit: int = 64, hint_budget: int | None = None) -> PeakResult:
    """The smallest peak on `device` this planner reaches (min-budget's "achieved")."""
    started = time.perf_counter()
    budget = hint_budget or sum(t.nbytes for t in graph.tensors) * 2
    configured = configure(graph, order, costs, {device: budget}, memory_unit=memory_unit)
    problem = configured.problem
    result = minimize_peak(problem, device, time_limit=max(0.5, time_limit - (
        time.perf_counter() - started)), workers=workers, seed=seed, memory=configured.memory)
    schedule = peak = None
    if result.decision is not None:
        schedule = emit_schedule(problem, result.decision)
        peak = simulate(graph, schedule, costs, alignment=problem.memory_unit).peaks[device]
    bound = result.bound * problem.memory_unit if result.bound is not None else None
    return PeakResult(schedule, peak, bound, result.status, time.perf_counter() - started,
                      configured.tier)
