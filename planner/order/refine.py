"""Exact re-ordering of windows around the peak: OLLA's model where the whole graph is too big.

The full sequential lifetime model grows with (ops x span) and does not even presolve within
seconds beyond a few hundred ops. But a window of consecutive steps of a given order can be
re-ordered exactly on its own: with every op outside the window fixed in place, the set of live
tensors at any step outside the window does not depend on how the window is ordered, so

    new peak = max(peak outside the window, optimum of the window problem).

Each round takes the step of the current peak, solves the window around it (the sequential
model of planner.order.olla_ilp, warm-started from the current order, at most
`window_time_limit` seconds), and keeps the result when it lowers the window's maximum. When
no window around a peak step improves, windows grow; it stops at the time limit or when a window
covers the graph. Every accepted window is a proven improvement, never a guess.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from planner.ir.graph import Graph
from planner.memory.liveness import Lifetimes, lifetimes, persistent_tensors
from planner.memory.sharing import state_updates
from planner.order.olla_ilp import (
    LifetimeProblem,
    ProblemTensor,
    solve_lifetime_problem,
    spans_from_successors,
)


def refine_order(
    graph: Graph,
    order: Sequence[int],
    *,
    window: int = 32,
    time_limit: float = 10.0,
    window_time_limit: float = 1.0,
    workers: int = 1,
    seed: int = 0,
) -> tuple[list[int], int]:
    """Improve `order` window by window; returns the order and how many windows improved it.

    When no window of the current size improves any peak step, the window and its time cap
    double (bigger windows see more, cost more), until the window covers the graph or time is up.
    """
    deadline = time.perf_counter() + time_limit
    current = list(order)
    n = len(current)
    improved = 0
    tried: set[tuple[int, int, int]] = set()
    while time.perf_counter() < deadline:
        life = lifetimes(graph, current)
        peak = life.peak
        progress = False
        for k in (k for k, live in enumerate(life.live_bytes) if live == peak):
            start = min(max(0, k - window // 2), max(0, n - window))
            stop = min(n, start + window)
            remaining = deadline - time.perf_counter()
            if (start, stop, peak) in tried or remaining <= 0.05:
                continue
            tried.add((start, stop, peak))
            candidate = _solve_window(
                graph, current, life, start, stop, min(remaining, window_time_limit), workers, seed
            )
            if candidate is not None:
                current, improved, progress = candidate, improved + 1, True
                break
        if not progress:
            if window >= n or deadline - time.perf_counter() <= 0.05:
                break
            window, window_time_limit = window * 2, window_time_limit * 2
    return current, improved


def _solve_window(graph: Graph, order: Sequence[int], life: Lifetimes, start: int, stop: int,
                  time_limit: float, workers: int, seed: int) -> list[int] | None:
    """Re-order order[start:stop] exactly; return the new order if the window's max dropped."""
    problem, ops = window_problem(graph, order, life, start, stop)
    current = max(life.live_bytes[start:stop])
    solution = solve_lifetime_problem(
        problem, list(range(len(ops))), time_limit=time_limit, workers=workers, seed=seed
    )
    if solution.step_of is None or solution.objective is None or solution.objective >= current:
        return None
    inner = [op for _, op in sorted(zip(solution.step_of, ops, strict=True))]
    return list(order[:start]) + inner + list(order[stop:])


def window_problem(graph: Graph, order: Sequence[int], life: Lifetimes, start: int, stop: int
                   ) -> tuple[LifetimeProblem, list[int]]:
    """The lifetime problem of order[start:stop] with everything else fixed (module doc)."""
    ops = list(order[start:stop])
    local = {op: i for i, op in enumerate(ops)}
    position = {op: k for k, op in enumerate(order)}
    updates = state_updates(graph)
    successors: list[list[int]] = [[] for _ in ops]
    for op in ops:
        for out in graph.ops[op].output_ids:
            successors[local[op]].extend(local[c] for c in graph.tensors[out].consumers
                                         if c in local)
    edges = {
        local[v]: [local[w] for w in ws if w in local]
        for v, ws in updates.edges.items() if v in local
    }
    for v, ws in edges.items():
        successors[v].extend(ws)
    asap, alap = spans_from_successors([sorted(set(s)) for s in successors])

    touched = {t for op in ops for t in (*graph.ops[op].input_ids, *graph.ops[op].output_ids)}
    baseline = 0
    tensors = []
    persistent = persistent_tensors(graph)
    for t in graph.tensors:
        if t.id in persistent or t.id not in touched:
            # Not moved by the window: counts iff live across all of it (aliases share bytes).
            spans_window = life.first[t.id] <= start and life.last[t.id] >= stop - 1
            if spans_window and t.id not in life.alias:
                baseline += t.nbytes
            continue
        readers_after = any(position[c] >= stop for c in t.consumers)
        tensors.append(ProblemTensor(
            size=0 if t.id in life.alias else t.nbytes,
            producer=local.get(t.producer) if t.producer is not None else None,
            readers=tuple(local[c] for c in t.consumers if c in local),
            to_end=t.is_graph_output or readers_after,
        ))
    steps = len(ops)
    problem = LifetimeProblem(
        steps=steps, asap=asap, alap=alap, one_op_per_step=True, tensors=tensors,
        baseline=[baseline] * steps, edges={v: ws for v, ws in edges.items() if ws},
    )
    return problem, ops
