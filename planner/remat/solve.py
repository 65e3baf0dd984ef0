"""Solve one RematProblem: heuristic schedules first, then CP-SAT seeded with the best of them.

`solve_problem` builds the XEngine model (planner.remat.constraints) at the given budgets, runs
the single-device heuristics (planner.remat.policies: keep-everything, budget-greedy, checkpoint
segmentations) on every device that can run every node, hints CP-SAT with the cheapest decision
that fits, and returns the best decision found with an honest status:

- OPTIMAL: CP-SAT proved the decision optimal *for this problem's model* (whether the model has
  been reduced in ways that can cut off better schedules: planner.remat.rematerialize's
  `ModelOutcome.exact`);
- FEASIBLE: a decision within the budgets, with CP-SAT's bound when it has one;
- INFEASIBLE: the model has no decision within the budgets (presolve found a stage whose fixed
  bytes exceed a budget, or CP-SAT proved it);
- UNKNOWN: no decision found in the time limit, nothing proven.

`minimize_peak` answers the inverse query on one device: the smallest budget the model meets.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from planner.remat.constraints import build_model
from planner.remat.decision import Decision, Evaluation, evaluate, from_solution, hint_for
from planner.remat.linear import solve_cpsat
from planner.remat.model import MemoryModel, RematModel
from planner.remat.policies import execute, sqrt_checkpoints, threshold_checkpoints
from planner.remat.problem import RematProblem
from planner.time_budget import REMAT_SHARES
from schemas.plan import SolverStatus


@dataclass(frozen=True)
class ProblemSolution:
    decision: Decision | None
    evaluation: Evaluation | None
    status: SolverStatus
    bound: float | None  # time units (lower bound on the model's optimum)
    method: str  # what produced the decision: "cpsat", "greedy", "keep", "checkpoints"...
    seconds: float
    stats: dict[str, object] = field(default_factory=dict)
    notes: tuple[str, ...] = ()


def heuristic_decisions(problem: RematProblem, budget_units: dict[str, int]
                        ) -> list[tuple[str, Decision, Evaluation]]:
    """Every heuristic decision that fits `budget_units`, cheapest first."""
    found: list[tuple[str, Decision, Evaluation]] = []
    candidates = []
    for device in (problem.home,):  # the executor keeps sources where they live
        if any(device not in n.cost for n in problem.nodes):
            continue
        budget = budget_units[device]
        candidates.append((f"keep@{device}", execute(problem, device, "keep")))
        candidates.append((f"greedy@{device}", execute(problem, device, "greedy",
                                                         budget=budget)))
        candidates.append((f"sqrt@{device}", execute(problem, device, "checkpoints",
                                                       checkpoints=sqrt_checkpoints(problem))))
        total = sum(problem.values[v].size for n in problem.nodes if n.recomputable
                    for v in n.values)
        for share in (0.02, 0.05, 0.1, 0.25):
            marks = threshold_checkpoints(problem, int(total * share))
            candidates.append((f"hybrid{share}@{device}", execute(
                problem, device, "hybrid", budget=budget, checkpoints=marks)))
    for name, result in candidates:
        if result.decision is None:
            continue
        evaluation = evaluate(problem, result.decision)
        if evaluation.fits(budget_units):
            found.append((name, result.decision, evaluation))
    found.sort(key=lambda item: item[2].cost)
    return found


def solve_problem(
    problem: RematProblem, budget_units: dict[str, int], *, time_limit: float, workers: int = 1,
    seed: int = 0, memory: MemoryModel = "stage", use_solver: bool = True,
    hint: Decision | None = None, use_heuristics: bool = True,
) -> ProblemSolution:
    """Best decision within `budget_units` (per device); see the module doc for the status."""
    started = time.perf_counter()
    notes: list[str] = []
    model = build_model(RematModel(problem, memory, "time", budget_units))
    stats: dict[str, object] = dict(model.stats)
    stats["build_seconds"] = round(time.perf_counter() - started, 3)
    if model.infeasible:
        return ProblemSolution(None, None, "INFEASIBLE", None, "presolve",
                               time.perf_counter() - started, stats, (model.infeasible[0],))
    heuristics = heuristic_decisions(problem, budget_units) if use_heuristics else []
    if hint is not None:
        try:
            evaluation = evaluate(problem, hint)
            if evaluation.fits(budget_units):
                heuristics.insert(0, ("previous", hint, evaluation))
                heuristics.sort(key=lambda item: item[2].cost)
        except ValueError:
            pass
    best_name, best, best_eval = (heuristics[0] if heuristics else (None, None, None))
    stats["heuristics"] = {name: ev.cost for name, _, ev in heuristics}
    if not use_solver:
        status: SolverStatus = "FEASIBLE" if best is not None else "UNKNOWN"
        return ProblemSolution(best, best_eval, status, None, best_name or "none",
                               time.perf_counter() - started, stats, tuple(notes))
    build_seconds = time.perf_counter() - started
    if best is None:
        # No heuristic fits: push the peak down from keep-everything until it fits (CP-SAT
        # stops as soon as it does: the peak variable cannot go below the budget). Its model is
        # as large as the one just built: without the time to build it, no repair (UNet-small
        # with 0.2 s left: the two models took 3.0 s to build, CP-SAT 2.0 s more at 0.1 s each).
        left = time_limit - (time.perf_counter() - started)
        if left < 2 * build_seconds:
            notes.append(f"no repair: {max(0.0, left):.2f} s left, its model takes about "
                         f"{build_seconds:.2f} s to build")
        else:
            repaired = _repair(problem, budget_units, memory, left * REMAT_SHARES.repair,
                               workers, seed)
            stats["repair"] = repaired[1]
            if repaired[0] is not None:
                best_name, best = "repair", repaired[0]
                best_eval = evaluate(problem, best)
            else:
                notes.append(f"no schedule within the budget found by repair ({repaired[1]})")
    values = hint_for(model, best) if best is not None else None
    if best is not None and values is None:
        notes.append(f"the {best_name} schedule is not expressible in the model; no hint")
    remaining = time_limit - (time.perf_counter() - started)
    if remaining <= 0:
        notes.append("no time left for CP-SAT after building its model")
        status = "FEASIBLE" if best is not None else "UNKNOWN"
        return ProblemSolution(best, best_eval, status, None, best_name or "none",
                               time.perf_counter() - started, stats, tuple(notes))
    result = solve_cpsat(model.lm, time_limit=max(0.1, remaining), workers=workers, seed=seed,
                         hint=values)
    stats["cpsat_status"] = result.status
    stats["cpsat_seconds"] = round(result.seconds, 3)
    bound = result.bound
    if result.status == "INFEASIBLE":
        return ProblemSolution(None, None, "INFEASIBLE", None, "cpsat",
                               time.perf_counter() - started, stats, tuple(notes))
    if result.values is not None:
        decision = from_solution(model, result.values)
        evaluation = evaluate(problem, decision)
        if best_eval is None or evaluation.cost <= best_eval.cost:
            status = "OPTIMAL" if result.status == "OPTIMAL" else "FEASIBLE"
            return ProblemSolution(decision, evaluation, status, bound, "cpsat",
                                   time.perf_counter() - started, stats, tuple(notes))
    if best is not None:
        assert best_name is not None and best_eval is not None  # set together with `best`
        status = "OPTIMAL" if bound is not None and bound >= best_eval.cost else "FEASIBLE"
        return ProblemSolution(best, best_eval, status, bound, best_name,
                               time.perf_counter() - started, stats, tuple(notes))
    return ProblemSolution(None, None, "UNKNOWN", bound, "none",
                           time.perf_counter() - started, stats, tuple(notes))


def _repair(problem: RematProblem, budget_units: dict[str, int], memory: MemoryModel,
            time_limit: float, workers: int, seed: int) -> tuple[Decision | None, str]:
    """A decision within `budget_units` found by minimizing the peaks down to them."""
    device = problem.home
    keep = execute(problem, device, "keep")
    if keep.decision is None or len(problem.devices) > 1:
        return None, "no keep-everything start"
    upper = max(keep.peak, max(budget_units.values()))
    model = build_model(RematModel(problem, memory, "peak", {d: upper for d in budget_units},
                                   peak_floor=dict(budget_units)))
    result = solve_cpsat(model.lm, time_limit=time_limit, workers=workers, seed=seed,
                         hint=hint_for(model, keep.decision))
    if result.values is None:
        return None, result.status
    decision = from_solution(model, result.values)
    evaluation = evaluate(problem, decision)
    if not evaluation.fits(budget_units):
        return None, f"peak {evaluation.peaks} after {result.seconds:.1f} s"
    return decision, f"fits after {result.seconds:.1f} s"


@dataclass(frozen=True)
class PeakSolution:
    decision: Decision | None
    peak: int | None  # units, the model's peak of `decision`
    bound: int | None  # units, a lower bound on the model's smallest peak
    status: str
    seconds: float


def minimize_peak(problem: RematProblem, device: str, *, time_limit: float, workers: int = 1,
                  seed: int = 0, memory: MemoryModel = "stage") -> PeakSolution:
    """Smallest peak (units) on `device` (a single-device problem) the model can reach."""
    started = time.perf_counter()
    keep = execute(problem, device, "keep")
    upper = keep.peak if keep.decision is not None else problem.base[device] + sum(
        v.size for v in problem.values) + max((n.workspace for n in problem.nodes), default=0)
    candidates = [r.decision for r in (
        keep,
        execute(problem, device, "checkpoints", checkpoints=sqrt_checkpoints(problem)),
    ) if r.decision is not None]
    model = build_model(RematModel(problem, memory, "peak", {device: upper}))
    best, best_peak = None, None
    for decision in candidates:
        peak = evaluate(problem, decision).peaks[device]
        if best_peak is None or peak < best_peak:
            best, best_peak = decision, peak
    values = hint_for(model, best) if best is not None else None
    result = solve_cpsat(model.lm, time_limit=max(0.1, time_limit - (time.perf_counter()
                                                                       - started)),
                         workers=workers, seed=seed, hint=values)
    bound = int(result.bound) if result.bound is not None else None
    if result.values is not None:
        decision = from_solution(model, result.values)
        peak = evaluate(problem, decision).peaks[device]
        if best_peak is None or peak <= best_peak:
            best, best_peak = decision, peak
    status = "OPTIMAL" if bound is not None and best_peak is not None and bound >= best_peak \
        else ("FEASIBLE" if best is not None else result.status)
    return PeakSolution(best, best_peak, bound, status, time.perf_counter() - started)
