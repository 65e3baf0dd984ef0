"""Operator ordering: a topological order that keeps peak live bytes low (OLLA, lifetime half).

`optimize_order` measures three fast orders with the one shared memory model
(planner.memory.liveness): the file order (what ONNX Runtime runs), growth-greedy list
scheduling and eager-free list scheduling. Then, within `time_limit`:

1. OLLA's lifetime ILP on the whole graph (planner.order.olla_ilp), warm-started from the best
   order: the exact "sequential" time model when it is small enough to solve
   (`exact_variable_limit` create variables), else the paper's "levels" model with §4.3's
   control edges when that is small enough (`levels_variable_limit`), else skipped;
2. exact re-ordering of windows around the peak (planner.order.refine) with the time left.

It returns the best order, which method produced it and what the others achieved. The status is
honest about what is proven:
- OPTIMAL when the order's peak equals a proven lower bound on every order's peak: the
  op-footprint bound (`order_lower_bound`) or the sequential model's CP-SAT bound (that model
  runs without control edges, so its bound covers every order that updates state in place);
- FEASIBLE otherwise, with `gap` against the best proven lower bound.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from planner.ir.graph import Graph
from planner.memory.liveness import lifetimes, order_lower_bound
from planner.order.control_edges import early_update_edges
from planner.order.heuristics import eager_free_order, file_order, levelize, memory_greedy_order
from planner.order.olla_ilp import count_variables, sequential_spans, solve_lifetimes
from planner.order.refine import refine_order
from schemas.plan import SolverReport, SolverStatus


@dataclass(frozen=True)
class OrderResult:
    order: tuple[int, ...]
    peak_bytes: int
    file_order_peak_bytes: int
    lower_bound_bytes: int
    method: str  # "file" | "greedy" | "eager_free" | "olla" | "olla_windows"
    status: SolverStatus  # OPTIMAL | FEASIBLE (see module docstring)
    gap: float  # (peak - lower bound) / lower bound
    seconds: float
    candidates: dict[str, int] = field(default_factory=dict)  # method -> peak bytes
    solver: dict[str, object] = field(default_factory=dict)  # the CP-SAT run, as reported
    notes: tuple[str, ...] = ()

    def report(self) -> SolverReport:
        """The order phase as the plan reports it (`Plan.solvers`)."""
        return SolverReport(
            phase="order", method=self.method, status=self.status,
            objective=self.peak_bytes, bound=self.lower_bound_bytes, gap=self.gap,
            baseline=self.file_order_peak_bytes, seconds=self.seconds, notes=list(self.notes),
        )


def optimize_order(
    graph: Graph,
    *,
    time_limit: float = 10.0,
    workers: int = 1,
    seed: int = 0,
    use_solver: bool = True,
    exact_variable_limit: int = 6_000,
    levels_variable_limit: int = 20_000,
) -> OrderResult:
    started = time.perf_counter()
    deadline = started + time_limit
    lower = order_lower_bound(graph)
    candidates = {
        "file": file_order(graph),
        "greedy": memory_greedy_order(graph),
        "eager_free": eager_free_order(graph),
    }
    peaks = {name: lifetimes(graph, order).peak for name, order in candidates.items()}
    notes: list[str] = []
    solver_report: dict[str, object] = {}

    def best_so_far() -> str:
        return min(peaks, key=lambda name: (peaks[name], list(candidates).index(name)))

    if use_solver and peaks[best_so_far()] > lower:
        time_model = _time_model(graph, exact_variable_limit, levels_variable_limit)
        if time_model is None:
            notes.append("graph too large for the whole-graph OLLA model; windows only")
        else:
            edges = early_update_edges(graph) if time_model == "levels" else None
            solution = solve_lifetimes(
                graph, edges, time_model=time_model, hint=candidates[best_so_far()],
                time_limit=time_limit / 2, workers=workers, seed=seed,
            )
            solver_report = {
                "time_model": solution.time_model, "status": solution.status,
                "objective": solution.objective, "bound": solution.bound,
                "seconds": round(solution.seconds, 3), "variables": solution.variables,
                "control_edges": len(edges or {}),
            }
            if time_model == "sequential":
                lower = max(lower, solution.bound)
            if solution.order is None:
                notes.append(f"OLLA model found no solution in {time_limit / 2:g} s "
                             f"({solution.status})")
            else:
                candidates["olla"] = solution.order
                peaks["olla"] = lifetimes(graph, solution.order).peak
        remaining = deadline - time.perf_counter()
        if peaks[best_so_far()] > lower and remaining > 0.1:
            refined, windows = refine_order(
                graph, candidates[best_so_far()], time_limit=remaining, workers=workers,
                seed=seed,
            )
            if windows:
                candidates["olla_windows"] = refined
                peaks["olla_windows"] = lifetimes(graph, refined).peak
                notes.append(f"{windows} window(s) re-ordered exactly around the peak")
    elif use_solver:
        notes.append("a heuristic order already meets the lower bound; solver not needed")
    best = best_so_far()
    peak = peaks[best]
    return OrderResult(
        order=tuple(candidates[best]),
        peak_bytes=peak,
        file_order_peak_bytes=peaks["file"],
        lower_bound_bytes=lower,
        method=best,
        status="OPTIMAL" if peak <= lower else "FEASIBLE",
        gap=(peak - lower) / lower if lower else 0.0,
        seconds=time.perf_counter() - started,
        candidates=peaks,
        solver=solver_report,
        notes=tuple(notes),
    )


def _time_model(graph: Graph, exact_limit: int, levels_limit: int) -> str | None:
    if count_variables(sequential_spans(graph)) <= exact_limit:
        return "sequential"
    if count_variables(levelize(graph)) <= levels_limit:
        return "levels"
    return None
