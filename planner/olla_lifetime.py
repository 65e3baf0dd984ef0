"""OLLA's tensor-lifetime ILP (Steiner et al. 2022, §3.2, §4.1, §4.4 eq. 13-14) in CP-SAT.

Two time models share one encoding:

- "levels" (the paper's): T = depth of the graph, op v may run at any level of its span
  [ASAP, ALAP] (eq. 10), ops sharing a level run "together". The solution is sequentialized by
  level; that order's true peak never exceeds the objective, but the objective over-counts
  parallel branches, so neither it nor its bound speak for all sequential orders.
- "sequential" (our extension): T = number of ops, exactly one op per step, span
  [#ancestors, n - 1 - #descendants]. Every topological order is a solution and vice versa, so
  the objective is that order's exact peak and the CP-SAT bound is a true lower bound on the
  peak of any order (unless control edges restrict the space). Bigger, so used for small graphs.

Variables, per the paper:
- C[v, t]: op v runs (creates all its outputs) at step t, only for t in SPAN(v). Sharing one
  variable per op for all its outputs is eq. 5 (siblings are created together).
- P[e, t]: tensor e is preserved at step t, only for t in MUL(e) (eq. 11) and fixed to 1 on
  PRES(e) (eq. 12).
Constraints: eq. 1 (create or preserve, not both), eq. 2 (preserve only what existed), eq. 3
(create once), eq. 4 (inputs resident when an op runs), eq. 13 (bytes at each step <= peak),
objective eq. 14 (minimize peak). Graph inputs exist before step 0; graph outputs must survive
to the last step; constants and persistent state (planner.state_updates) are a fixed baseline;
updated state written in place costs no bytes, and its "read before update" edges, like OLLA's
control edges, are precedence constraints. A known-good order can be given as a hint.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from ortools.sat.python import cp_model

from planner.graph import Graph
from planner.order_heuristics import levelize, order_by_levels, successor_lists
from planner.state_updates import state_updates

STATUS_NAMES = {
    cp_model.OPTIMAL: "OPTIMAL",
    cp_model.FEASIBLE: "FEASIBLE",
    cp_model.INFEASIBLE: "INFEASIBLE",
    cp_model.MODEL_INVALID: "MODEL_INVALID",
    cp_model.UNKNOWN: "UNKNOWN",
}


@dataclass(frozen=True)
class LifetimeSolution:
    order: list[int] | None  # None when no solution was found in time
    status: str
    objective: int | None  # peak bytes of the schedule in the model's time steps
    bound: int  # CP-SAT's proven lower bound on that objective
    seconds: float
    variables: int
    time_model: str  # "levels" | "sequential"


def sequential_spans(graph: Graph, control_edges: dict[int, list[int]] | None = None
                     ) -> tuple[list[int], list[int]]:
    """[#ancestors, n - 1 - #descendants] for every op: where it can sit in a sequential order."""
    successors = successor_lists(graph, control_edges)
    n = len(graph.ops)
    asap, _ = levelize(graph, control_edges)
    by_level = sorted(range(n), key=lambda v: asap[v])
    ancestors = [0] * n  # bitsets as Python ints
    for v in by_level:
        for w in successors[v]:
            ancestors[w] |= ancestors[v] | (1 << v)
    descendants = [0] * n
    for v in reversed(by_level):
        for w in successors[v]:
            descendants[v] |= descendants[w] | (1 << w)
    return (
        [a.bit_count() for a in ancestors],
        [n - 1 - d.bit_count() for d in descendants],
    )


def count_variables(spans: tuple[list[int], list[int]]) -> int:
    """Number of C variables of a span assignment: the model's size in one number."""
    return sum(hi - lo + 1 for lo, hi in zip(*spans, strict=True))


def solve_lifetimes(
    graph: Graph,
    control_edges: dict[int, list[int]] | None = None,
    *,
    time_model: str = "levels",
    hint: Sequence[int] | None = None,
    time_limit: float = 10.0,
    workers: int = 1,
    seed: int = 0,
) -> LifetimeSolution:
    started = time.perf_counter()
    updates = state_updates(graph)
    edges = merge_edges(control_edges, updates.edges)
    if time_model == "levels":
        asap, alap = levelize(graph, edges)
    elif time_model == "sequential":
        asap, alap = sequential_spans(graph, edges)
    else:
        raise ValueError(f"unknown time model {time_model!r}")
    depth = max(alap, default=-1) + 1
    model = cp_model.CpModel()

    create = {
        op.id: {t: model.NewBoolVar(f"C_{op.id}_{t}") for t in range(asap[op.id], alap[op.id] + 1)}
        for op in graph.ops
    }
    for op in graph.ops:  # eq. 3: every op runs once (and so creates each output once)
        model.AddExactlyOne(create[op.id].values())
    if time_model == "sequential":
        for t in range(depth):
            model.AddExactlyOne(c[t] for c in create.values() if t in c)
    _add_edges(model, create, edges)

    level_terms: list[list[tuple[int, cp_model.IntVar | int]]] = [[] for _ in range(depth)]
    constant_bytes = 0
    preserves = {}
    for tensor in graph.tensors:
        if tensor.is_initializer or tensor.id in updates.persistent:
            constant_bytes += tensor.nbytes  # resident for the whole step
            continue
        preserve = _preserve_vars(model, tensor, create, asap, alap, depth)
        preserves[tensor.id] = preserve
        if tensor.id in updates.in_place:
            continue  # written over its state's storage: orders it, costs no bytes
        if tensor.producer is not None:
            for t, c in create[tensor.producer].items():
                level_terms[t].append((tensor.nbytes, c))
        for t, p in preserve.items():
            level_terms[t].append((tensor.nbytes, p))
    variables = len(model.Proto().variables)

    upper = constant_bytes + sum(t.nbytes for t in graph.tensors if not t.is_initializer)
    peak = model.NewIntVar(0, upper, "peak")
    for terms in level_terms:  # eq. 13
        model.Add(constant_bytes + sum(size * var for size, var in terms) <= peak)
    model.Minimize(peak)  # eq. 14
    if hint is not None and time_model == "sequential":
        _add_hint(model, graph, hint, create, preserves)

    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(0.01, time_limit)
    solver.parameters.num_workers = workers
    solver.parameters.random_seed = seed
    status = solver.Solve(model)
    seconds = time.perf_counter() - started
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return LifetimeSolution(None, STATUS_NAMES.get(status, "UNKNOWN"), None,
                                int(solver.BestObjectiveBound()), seconds, variables, time_model)
    level_of = [
        next(t for t, c in create[op.id].items() if solver.BooleanValue(c)) for op in graph.ops
    ]
    return LifetimeSolution(
        order=order_by_levels(graph, level_of),
        status=STATUS_NAMES[status],
        objective=int(solver.ObjectiveValue()),
        bound=int(solver.BestObjectiveBound()),
        seconds=seconds,
        variables=variables,
        time_model=time_model,
    )


def merge_edges(*edge_maps: dict[int, list[int]] | None) -> dict[int, list[int]]:
    merged: dict[int, list[int]] = {}
    for edges in edge_maps:
        for v, ws in (edges or {}).items():
            merged.setdefault(v, []).extend(w for w in ws if w not in merged[v])
    return merged


def _add_edges(model, create, edges) -> None:
    """Precedence edges without a tensor (control / read-before-update): step(v) < step(w)."""
    step = {
        v: sum(t * c for t, c in by_step.items()) for v, by_step in create.items()
    }
    for v, ws in edges.items():
        for w in ws:
            model.Add(step[v] + 1 <= step[w])


def _add_hint(model, graph, order, create, preserves) -> None:
    """Hint a full sequential solution: C from the order's positions, P from its lifetimes."""
    position = {op: k for k, op in enumerate(order)}
    for op_id, by_step in create.items():
        for t, c in by_step.items():
            model.AddHint(c, t == position[op_id])
    for tensor_id, by_step in preserves.items():
        tensor = graph.tensors[tensor_id]
        born = -1 if tensor.producer is None else position[tensor.producer]
        reads = [position[r] for r in tensor.consumers]
        until = len(order) - 1 if tensor.is_graph_output else max(reads, default=born)
        for t, p in by_step.items():
            if not isinstance(p, int):
                model.AddHint(p, born < t <= until)


def _preserve_vars(model, tensor, create, asap, alap, depth):
    """P[e, t] over MUL(e) with PRES(e) fixed, and eq. 1, 2 and 4 for one tensor.

    Returns the variables by step (the constant 1 on PRES).
    """
    readers = tensor.consumers
    if tensor.producer is None:  # graph input: resident from before step 0, at least at 0
        born, fixed_until = -1, max((asap[r] for r in readers), default=0)
    else:
        born, fixed_until = asap[tensor.producer], max((asap[r] for r in readers), default=-1)
        fixed_from = alap[tensor.producer] + 1
    last = depth - 1 if tensor.is_graph_output else max((alap[r] for r in readers), default=-1)
    if tensor.producer is None:
        last = max(last, 0)
    if tensor.is_graph_output:
        fixed_until = depth - 1
    preserve: dict[int, cp_model.IntVar | int] = {}
    for t in range(born + 1, last + 1):
        pinned = (t <= fixed_until) if tensor.producer is None else (fixed_from <= t <= fixed_until)
        if pinned:
            preserve[t] = 1  # eq. 12 (PRES)
        else:
            preserve[t] = model.NewBoolVar(f"P_{tensor.id}_{t}")
    made = create.get(tensor.producer, {}) if tensor.producer is not None else {}
    for t, p in preserve.items():
        previous = preserve.get(t - 1, 1 if tensor.producer is None and t == 0 else 0)
        created_before = made.get(t - 1, 0)
        if not all(isinstance(x, int) for x in (p, previous, created_before)):
            model.Add(p <= previous + created_before)  # eq. 2, also into a pinned PRES level
        if t in made:
            model.Add(p + made[t] <= 1)  # eq. 1
    for reader in readers:  # eq. 4: an op's inputs are resident when it runs
        for t, c in create[reader].items():
            p = preserve.get(t, 0)
            if isinstance(p, int):
                if p == 0:
                    model.Add(c == 0)
            else:
                model.AddImplication(c, p)
    if tensor.is_graph_output and tensor.producer is not None:
        end = preserve.get(depth - 1, 0)
        model.Add(end + made.get(depth - 1, 0) == 1)  # outputs survive to the end
    return preserve
