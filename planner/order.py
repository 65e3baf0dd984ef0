"""Operator ordering: a topological order that keeps peak live bytes low (OLLA, lifetime half).

`optimize_order` measures the file order (what ONNX Runtime runs) and the memory-aware list
scheduler with the one shared memory model (planner.lifetimes), then runs OLLA's lifetime ILP in
CP-SAT (planner.olla_lifetime) warm-started from the best of them, and returns the best order,
saying which method won and why the others did not.

Which OLLA time model runs: the exact "sequential" one when its size (number of C variables)
is at most `exact_variable_limit`, else the paper's "levels" one with §4.3's control edges.

The status is honest about what is proven:
- OPTIMAL when the order's peak equals a proven lower bound on every order's peak: the simple
  op-footprint bound (`order_lower_bound`) or the sequential model's CP-SAT bound when that model
  ran without control edges;
- FEASIBLE otherwise, with `gap` against the best proven lower bound.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from planner.control_edges import early_update_edges
from planner.graph import Graph
from planner.lifetimes import lifetimes, order_lower_bound
from planner.olla_lifetime import count_variables, sequential_spans, solve_lifetimes
from planner.order_heuristics import file_order, memory_greedy_order


@dataclass(frozen=True)
class OrderResult:
    order: tuple[int, ...]
    peak_bytes: int
    file_order_peak_bytes: int
    lower_bound_bytes: int
    method: str  # "file" | "greedy" | "olla"
    status: str  # OPTIMAL | FEASIBLE (see module docstring)
    gap: float  # (peak - lower bound) / lower bound
    seconds: float
    candidates: dict[str, int] = field(default_factory=dict)  # method -> peak bytes
    solver: dict[str, object] = field(default_factory=dict)  # the CP-SAT run, as reported
    notes: tuple[str, ...] = ()


def optimize_order(
    graph: Graph,
    *,
    time_limit: float = 10.0,
    workers: int = 1,
    seed: int = 0,
    use_solver: bool = True,
    exact_variable_limit: int = 40_000,
) -> OrderResult:
    started = time.perf_counter()
    lower = order_lower_bound(graph)
    candidates = {"file": file_order(graph), "greedy": memory_greedy_order(graph)}
    peaks = {name: lifetimes(graph, order).peak for name, order in candidates.items()}
    notes: list[str] = []
    solver_report: dict[str, object] = {}
    if use_solver and min(peaks.values()) > lower:
        best_heuristic = min(peaks, key=peaks.__getitem__)
        exact = count_variables(sequential_spans(graph)) <= exact_variable_limit
        edges = None if exact else early_update_edges(graph)
        solution = solve_lifetimes(
            graph, edges, time_model="sequential" if exact else "levels",
            hint=candidates[best_heuristic], time_limit=time_limit, workers=workers, seed=seed,
        )
        solver_report = {
            "time_model": solution.time_model, "status": solution.status,
            "objective": solution.objective, "bound": solution.bound,
            "seconds": round(solution.seconds, 3), "variables": solution.variables,
            "control_edges": len(edges or {}),
        }
        if exact:
            lower = max(lower, solution.bound)
        if solution.order is None:
            notes.append(f"OLLA model found no solution in {time_limit:g} s "
                         f"({solution.status}); using the best heuristic order")
        else:
            candidates["olla"] = solution.order
            peaks["olla"] = lifetimes(graph, solution.order).peak
    elif use_solver:
        notes.append("a heuristic order already meets the lower bound; solver not needed")
    best = min(peaks, key=lambda name: (peaks[name], list(candidates).index(name)))
    if "olla" in peaks and best != "olla":
        notes.append(f"OLLA's order ({peaks['olla']} B) did not beat {best} ({peaks[best]} B)")
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
