"""Operator ordering: a topological order that keeps peak live bytes low (OLLA, lifetime half).

`optimize_order` first runs the quick orders (planner.order.heuristics: the file order, which
ONNX Runtime runs, and the list schedulers), each well under a second up to thousands of ops,
in that order until `time_limit` (the file order always), then the best of them with its
shrinking groups moved to emptier steps (planner.order.shrink_early), and measures them with
the one shared memory model (planner.memory.liveness). When the best peaks above the
op-footprint bound, the keep-everything floor (planner.order.floor, a few max-flows: 0.1 s on
GPT-2-small) tightens the lower bound. It stops there when exact ordering cannot pay: the best
quick order meets the lower bound, or its peak is within `enough_bytes` (the caller's budget:
keeping everything then already fits, and a lower peak buys nothing). Otherwise, within
`time_limit`:

1. OLLA's lifetime ILP on the whole graph (planner.order.olla_ilp), warm-started from the best
   order, for `WHOLE_GRAPH_SHARE` of the time: the exact "sequential" time model when it
   is small enough to solve (`exact_variable_limit` create variables), else the paper's
   "levels" model with §4.3's control edges when that is small enough
   (`levels_variable_limit`), else skipped;
2. exact re-ordering of windows around the peak (planner.order.refine) with the time left,
   when at least `WINDOW_FLOOR_S` is left; it stops at the lower bound or at
   `enough_bytes`.

It returns the best order, which method produced it, what the others achieved and why it stopped.
The status is honest about what is proven:
- OPTIMAL when the order's peak equals a proven lower bound on every order's peak: the
  op-footprint bound (`order_lower_bound`), the keep-everything floor, or the sequential
  model's CP-SAT bound (that model runs without control edges, so its bound covers every order
  that updates state in place);
- FEASIBLE otherwise, with `gap` against the best proven lower bound.

That bound (`OrderResult.lower_bound_bytes`, the order phase's reported bound) is about orders
of the graph as it is, every value kept until its last read: the peak of a plan that recomputes
values may go below it. A bound for those is `order_lower_bound` alone.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Literal

from planner.ir.graph import Graph
from planner.memory.liveness import check_order, lifetimes, order_lower_bound
from planner.order.control_edges import early_update_edges
from planner.order.floor import fewest_live_bytes, keep_everything_floor
from planner.order.heuristics import QUICK_ORDERS, levelize
from planner.order.olla_ilp import (
    count_variables,
    merge_edges,
    sequential_spans,
    solve_lifetimes,
)
from planner.order.refine import refine_order, view_read_edges
from planner.order.shrink_early import shrink_early
from schemas.plan import SolverReport, SolverStatus

# How ordering splits its own limit once the quick orders are measured (the pipeline's shares
# are in planner.time_budget, above this layer): this share for OLLA's ILP on the whole graph,
# the rest for exact windows, which run only when at least WINDOW_FLOOR_S is left (less does not
# even build and presolve one window's model).
WHOLE_GRAPH_SHARE = 0.5
# What choosing and building the whole-graph model costs per op (0.3-0.5 s on a 20,000-op chain,
# with margin): a shorter share leaves CP-SAT nothing, and a 2 s request on that chain paid it.
MODEL_BUILD_S_PER_OP = 25e-6
WINDOW_FLOOR_S = 0.25
# The keep-everything floor examines ops until this many seconds have passed (a floor cut short
# is still a valid bound; the bench models need a handful of max-flows, well within it).
FLOOR_LIMIT_S = 0.3

# Why ordering stopped: only the quick orders were asked for; one met the lower bound; the best
# order's peak is within `enough_bytes`; the exact phases ran (to a proof or the time limit).
StopReason = Literal["quick", "bound", "enough", "searched"]


@dataclass(frozen=True)
class OrderResult:
    order: tuple[int, ...]
    peak_bytes: int
    file_order_peak_bytes: int
    lower_bound_bytes: int  # no order peaks lower; plans that recompute may (module doc)
    method: str  # a QUICK_ORDERS name | "shrink_early" | "olla" | "olla_windows"
    status: SolverStatus  # OPTIMAL | FEASIBLE (see module docstring)
    gap: float  # (peak - lower bound) / lower bound
    seconds: float
    candidates: dict[str, int] = field(default_factory=dict)  # method -> peak bytes
    solver: dict[str, object] = field(default_factory=dict)  # the CP-SAT run, as reported
    notes: tuple[str, ...] = ()
    stopped: StopReason = "searched"
    quick_seconds: float = 0.0  # of `seconds`, the quick orders and their peaks
    # The other orders found, lowest peak first (distinct from `order`): the rematerialization
    # search tries them when `order` gives it nothing, since the order that holds least when
    # everything is kept is not always the one that evicts best (unet_small at persistent +
    # 30% of its activations: only the eager-free order with ONNX Runtime's ties fits).
    alternatives: tuple[tuple[int, ...], ...] = ()

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
    enough_bytes: int | None = None,
    start: OrderResult | None = None,
    exact_variable_limit: int = 6_000,
    levels_variable_limit: int = 20_000,
) -> OrderResult:
    """Order `graph` (module doc). `start`: an earlier result for the same graph that stopped
    short of exact ordering (stopped "quick" or "enough"), to go on from instead of running the
    quick orders again."""
    started = time.perf_counter()
    search = (_Search.quick(graph, started + time_limit) if start is None
              else _Search.resumed(graph, start))
    if not use_solver:
        return search.result("quick", started)
    if search.peak() <= search.lower:
        search.notes.append("a quick order meets the lower bound; exact ordering not needed")
        return search.result("bound", started)
    if enough_bytes is not None and search.peak() <= enough_bytes:
        search.notes.append(f"a quick order's peak is within the {enough_bytes} B asked for; "
                            "exact ordering skipped")
        return search.result("enough", started)
    deadline = started + time_limit
    whole_graph = None
    if time_limit * WHOLE_GRAPH_SHARE < MODEL_BUILD_S_PER_OP * len(graph.ops):
        search.notes.append("too little time to build the whole-graph OLLA model; windows only")
    elif (whole_graph := _time_model(graph, exact_variable_limit, levels_variable_limit)) is None:
        search.notes.append("graph too large for the whole-graph OLLA model; windows only")
    else:
        search.solve_whole_graph(whole_graph, time_limit * WHOLE_GRAPH_SHARE,
                                 workers, seed)
    target = max(search.lower, enough_bytes or 0)
    remaining = deadline - time.perf_counter()
    if search.peak() > target and remaining >= WINDOW_FLOOR_S:
        # A window covering the whole graph is the sequential model already tried.
        widest = len(graph.ops) - 1 if whole_graph == "sequential" else len(graph.ops)
        refined, windows = refine_order(graph, search.best_order(), time_limit=remaining,
                                        target=target, max_window=widest, workers=workers,
                                        seed=seed)
        if windows:
            search.add("olla_windows", refined)
            search.notes.append(f"{windows} window(s) re-ordered exactly around the peak")
    reached = enough_bytes is not None and search.peak() <= enough_bytes
    return search.result("enough" if reached else "searched", started)


@dataclass
class _Search:
    """The orders found so far (only the best is kept when resumed) and their peaks."""

    graph: Graph
    orders: dict[str, list[int]]
    peaks: dict[str, int]
    lower: int
    quick_seconds: float
    seconds_before: float = 0.0
    notes: list[str] = field(default_factory=list)
    solver: dict[str, object] = field(default_factory=dict)

    @classmethod
    def quick(cls, graph: Graph, deadline: float) -> _Search:
        """The quick orders, in QUICK_ORDERS' order until `deadline` (the first always)."""
        started = time.perf_counter()
        orders: dict[str, list[int]] = {}
        peaks: dict[str, int] = {}
        curves: dict[str, tuple[int, ...]] = {}  # live bytes per step
        for name, make in QUICK_ORDERS.items():
            if orders and time.perf_counter() > deadline:
                break
            made = make(graph)
            if made is None:
                continue
            orders[name] = made
            curves[name] = lifetimes(graph, made).live_bytes
            peaks[name] = max(curves[name], default=0)
        base = min(peaks, key=peaks.__getitem__)
        moved = (shrink_early(graph, orders[base], curves[base])
                 if time.perf_counter() <= deadline else None)
        if moved is not None:
            orders["shrink_early"] = moved
            curves["shrink_early"] = lifetimes(graph, moved).live_bytes
            peaks["shrink_early"] = max(curves["shrink_early"], default=0)
        lower = order_lower_bound(graph)
        notes: list[str] = []
        if min(peaks.values()) > lower and time.perf_counter() <= deadline:
            upper = fewest_live_bytes(graph, ((orders[n], curves[n]) for n in orders))
            floor = keep_everything_floor(
                graph, upper, deadline=min(deadline, time.perf_counter() + FLOOR_LIMIT_S))
            lower = max(lower, floor.bytes)
            if not floor.exact:
                notes.append(f"keep-everything floor cut short after {floor.cuts} max-flows")
        return cls(graph, orders, peaks, lower, time.perf_counter() - started, notes=notes)

    @classmethod
    def resumed(cls, graph: Graph, start: OrderResult) -> _Search:
        return cls(graph, {start.method: list(start.order)}, dict(start.candidates),
                   start.lower_bound_bytes, start.quick_seconds, seconds_before=start.seconds,
                   solver=dict(start.solver))

    def best(self) -> str:
        names = list(self.peaks)
        return min(self.orders, key=lambda name: (self.peaks[name], names.index(name)))

    def best_order(self) -> list[int]:
        return self.orders[self.best()]

    def peak(self) -> int:
        return self.peaks[self.best()]

    def add(self, name: str, order: list[int]) -> None:
        self.orders[name] = order
        self.peaks[name] = lifetimes(self.graph, order).peak

    def solve_whole_graph(self, time_model: str, time_limit: float, workers: int,
                          seed: int) -> None:
        """OLLA's ILP on the whole graph, warm-started from the best order (module doc, 1.)."""
        graph = self.graph
        # The view edges keep the order of a view's writer and readers, which the model's
        # tensors alone do not (a view is its root's storage there); they add no constraint on
        # top of the data dependencies, so the sequential model's bound still covers every order.
        edges = merge_edges(early_update_edges(graph) if time_model == "levels" else None,
                            view_read_edges(graph))
        solution = solve_lifetimes(graph, edges, time_model=time_model, hint=self.best_order(),
                                   time_limit=time_limit, workers=workers, seed=seed)
        self.solver = {
            "time_model": solution.time_model, "status": solution.status,
            "objective": solution.objective, "bound": solution.bound,
            "seconds": round(solution.seconds, 3), "variables": solution.variables,
            "control_edges": sum(map(len, edges.values())),
        }
        if time_model == "sequential":
            self.lower = max(self.lower, solution.bound)
        if solution.order is None:
            self.notes.append(f"OLLA model found no solution in {time_limit:g} s "
                              f"({solution.status})")
            return
        try:
            check_order(graph, solution.order)
        except ValueError as error:  # a modelling bug must not cost the quick orders
            self.notes.append(f"OLLA model's order rejected: {error}")
            return
        self.add("olla", solution.order)

    def result(self, stopped: StopReason, started: float) -> OrderResult:
        best = self.best()
        peak, lower = self.peaks[best], self.lower
        return OrderResult(
            order=tuple(self.orders[best]), peak_bytes=peak,
            file_order_peak_bytes=self.peaks["file"], lower_bound_bytes=lower, method=best,
            status="OPTIMAL" if peak <= lower else "FEASIBLE",
            gap=(peak - lower) / lower if lower else 0.0,
            seconds=self.seconds_before + time.perf_counter() - started,
            candidates=dict(self.peaks), solver=self.solver, notes=tuple(self.notes),
            stopped=stopped, quick_seconds=self.quick_seconds,
            alternatives=self.alternatives(best),
        )

    def alternatives(self, best: str) -> tuple[tuple[int, ...], ...]:
        found: dict[tuple[int, ...], None] = {}
        for name in sorted(self.orders, key=self.peaks.__getitem__):
            found.setdefault(tuple(self.orders[name]))
        found.pop(tuple(self.orders[best]), None)
        return tuple(found)


def _time_model(graph: Graph, exact_limit: int, levels_limit: int) -> str | None:
    if count_variables(sequential_spans(graph)) <= exact_limit:
        return "sequential"
    if count_variables(levelize(graph)) <= levels_limit:
        return "levels"
    return None
