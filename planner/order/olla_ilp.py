"""OLLA's tensor-lifetime ILP (Steiner et al. 2022, §3.2, §4.1, §4.4 eq. 13-14) in CP-SAT.

Two time models share one encoding:

- "levels" (the paper's): T = depth of the graph, op v may run at any level of its span
  [ASAP, ALAP] (eq. 10), ops sharing a level run "together". The solution is sequentialized by
  level; that order's true peak never exceeds the objective, but the objective over-counts
  parallel branches, so neither it nor its bound speak for all sequential orders.
- "sequential" (our extension): T = number of ops, exactly one op per step, span
  [#ancestors, n - 1 - #descendants]. Every topological order is a solution and vice versa; the
  objective never exceeds that order's peak and the CP-SAT bound is a true lower bound on the
  peak of any order (unless control edges restrict the space). Bigger, so used for small graphs.

Variables, per the paper:
- C[v, t]: op v runs (creates all its outputs) at step t, only for t in SPAN(v). Sharing one
  variable per op for all its outputs is eq. 5 (siblings are created together).
- P[e, t]: tensor e is preserved at step t, only for t in MUL(e) (eq. 11) and fixed to 1 on
  PRES(e) (eq. 12).
Constraints: eq. 1 (create or preserve, not both), eq. 2 (preserve only what existed), eq. 3
(create once), eq. 4 (inputs resident when an op runs), eq. 13 (bytes at each step <= peak),
objective eq. 14 (minimize peak). Graph inputs exist before step 0; graph outputs must survive
to the last step; constants and persistent state (planner.memory.sharing) are a fixed baseline;
storage sharing (planner.memory.sharing) is modelled so that the model stays a relaxation of the
memory model: a view costs nothing and keeps its source resident for its readers (exact); the
values of a state's update chain cost nothing (they may sit in the state's storage); in the
sequential model, whose bound must hold for every order, an output that may be written over one
of its op's inputs costs nothing in the step that writes it (exact where the input does die
there), while the levels model counts it (its objective stays above its order's true peak).
The chains' "read before update" edges, like OLLA's control edges, are precedence constraints.
A known-good order can be given as a hint; the true peak of the order found is measured with
planner.memory.liveness.

The model is built from a `LifetimeProblem` (ops with spans, tensors with producer, readers and
size, a per-step baseline), so the same encoding solves the whole graph and, in
planner.order.refine, a window of an existing order with everything outside it fixed.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from planner.ir.graph import Graph
from planner.memory.sharing import state_updates
from planner.memory.zones import persistent_tensors
from planner.order.heuristics import (
    levelize,
    order_by_levels,
    successor_lists,
    topological_sort,
)

if TYPE_CHECKING:  # OR-Tools' cp_model imports pandas (~0.6 s): imported where a model is built
    from ortools.sat.python import cp_model

@dataclass(frozen=True)
class ProblemTensor:
    size: int
    producer: int | None  # local op index; None: resident before step 0
    readers: tuple[int, ...]  # local op indices
    to_end: bool  # must stay resident through the last step
    free_when_written: bool = False  # may be written over an input dying at its producer


@dataclass(frozen=True)
class LifetimeProblem:
    """What the lifetime model needs, in local indices: ops 0..n-1 with spans, tensors, edges."""

    steps: int
    asap: list[int]
    alap: list[int]
    one_op_per_step: bool
    tensors: list[ProblemTensor]
    baseline: list[int]  # bytes resident at each step whatever the schedule
    edges: dict[int, list[int]] = field(default_factory=dict)  # precedence without a tensor

    @property
    def create_variables(self) -> int:
        return sum(hi - lo + 1 for lo, hi in zip(self.asap, self.alap, strict=True))


@dataclass(frozen=True)
class ProblemSolution:
    step_of: list[int] | None  # per local op; None when nothing was found in time
    status: str
    objective: int | None
    bound: int
    seconds: float
    variables: int


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
    return spans_from_successors(successor_lists(graph, control_edges))


def spans_from_successors(successors: list[list[int]]) -> tuple[list[int], list[int]]:
    n = len(successors)
    topo = topological_sort(successors)
    ancestors = [0] * n  # bitsets as Python ints
    for v in topo:
        for w in successors[v]:
            ancestors[w] |= ancestors[v] | (1 << v)
    descendants = [0] * n
    for v in reversed(topo):
        for w in successors[v]:
            descendants[v] |= descendants[w] | (1 << w)
    return (
        [a.bit_count() for a in ancestors],
        [n - 1 - d.bit_count() for d in descendants],
    )


def count_variables(spans: tuple[list[int], list[int]]) -> int:
    """Number of C variables of a span assignment: the model's size in one number."""
    return sum(hi - lo + 1 for lo, hi in zip(*spans, strict=True))


def graph_problem(graph: Graph, control_edges: dict[int, list[int]] | None, time_model: str
                  ) -> LifetimeProblem:
    """The whole step as a lifetime problem (ops keep their graph ids)."""
    updates = state_updates(graph)
    edges = merge_edges(control_edges, updates.edges)
    if time_model == "levels":
        asap, alap = levelize(graph, edges)
    elif time_model == "sequential":
        asap, alap = sequential_spans(graph, edges)
    else:
        raise ValueError(f"unknown time model {time_model!r}")
    steps = max(alap, default=-1) + 1
    constant = 0
    tensors = []
    persistent = persistent_tensors(graph)
    in_state = updates.in_state
    relaxed = time_model == "sequential"  # its bound must hold; the levels model over-counts
    protected = persistent | {t for t in graph.inputs if t not in updates.persistent}
    readers = {t.id: set(t.consumers) for t in graph.tensors}
    to_end = {t.id: t.is_graph_output for t in graph.tensors}
    for view in updates.view_source:  # a view's readers keep its source's bytes resident
        root = updates.view_root(view)
        readers[root] |= readers[view]
        to_end[root] = to_end[root] or to_end[view]
    for t in graph.tensors:
        if t.id in persistent:
            constant += t.nbytes  # resident for the whole step
            continue
        if t.id in updates.view_source:
            continue
        tensors.append(ProblemTensor(
            size=0 if t.id in in_state else t.nbytes,
            producer=t.producer,
            readers=tuple(sorted(readers[t.id])),
            to_end=to_end[t.id],
            free_when_written=relaxed and any(updates.view_root(x) not in protected
                                              for x in updates.candidates.get(t.id, ())),
        ))
    return LifetimeProblem(
        steps=steps, asap=asap, alap=alap, one_op_per_step=time_model == "sequential",
        tensors=tensors, baseline=[constant] * steps, edges=edges,
    )


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
    """OLLA on the whole graph; the solution comes back as a sequential order."""
    started = time.perf_counter()
    problem = graph_problem(graph, control_edges, time_model)
    hint_steps = None
    if hint is not None and problem.one_op_per_step:
        hint_steps = [0] * len(graph.ops)
        for k, op in enumerate(hint):
            hint_steps[op] = k
    solution = solve_lifetime_problem(problem, hint_steps, time_limit=time_limit, workers=workers,
                             seed=seed)
    order = None if solution.step_of is None else order_by_levels(graph, solution.step_of)
    return LifetimeSolution(
        order=order, status=solution.status, objective=solution.objective,
        bound=solution.bound, seconds=time.perf_counter() - started,
        variables=solution.variables, time_model=time_model,
    )


def solve_lifetime_problem(
    problem: LifetimeProblem,
    hint_steps: Sequence[int] | None = None,
    *,
    time_limit: float = 10.0,
    workers: int = 1,
    seed: int = 0,
) -> ProblemSolution:
    from ortools.sat.python import cp_model

    started = time.perf_counter()
    steps = problem.steps
    model = cp_model.CpModel()
    create = [
        {t: model.new_bool_var(f"C_{v}_{t}") for t in range(lo, hi + 1)}
        for v, (lo, hi) in enumerate(zip(problem.asap, problem.alap, strict=True))
    ]
    for by_step in create:  # eq. 3: every op runs once (and so creates each output once)
        model.add_exactly_one(by_step.values())
    if problem.one_op_per_step:
        for t in range(steps):
            model.add_exactly_one(c[t] for c in create if t in c)
    _add_edges(model, create, problem.edges)

    level_terms: list[list[tuple[int, cp_model.IntVar | int]]] = [[] for _ in range(steps)]
    preserves = []
    for tensor in problem.tensors:
        preserve = _preserve_vars(model, tensor, create, problem)
        preserves.append(preserve)
        if tensor.size == 0:
            continue
        if tensor.producer is not None and not tensor.free_when_written:
            for t, c in create[tensor.producer].items():
                level_terms[t].append((tensor.size, c))
        for t, p in preserve.items():
            level_terms[t].append((tensor.size, p))
    variables = len(model.proto.variables)

    upper = max(problem.baseline, default=0) + sum(t.size for t in problem.tensors)
    peak = model.new_int_var(0, upper, "peak")
    for t, terms in enumerate(level_terms):  # eq. 13
        model.add(problem.baseline[t] + sum(size * var for size, var in terms) <= peak)
    model.minimize(peak)  # eq. 14
    if hint_steps is not None:
        _add_hint(model, problem, hint_steps, create, preserves)

    solver = cp_model.CpSolver()
    # The time limit covers building the model too.
    solver.parameters.max_time_in_seconds = max(0.01, time_limit - (time.perf_counter() - started))
    solver.parameters.num_workers = workers
    solver.parameters.random_seed = seed
    status = solver.solve(model)
    seconds = time.perf_counter() - started
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return ProblemSolution(None, solver.status_name(status), None,
                               int(solver.best_objective_bound), seconds, variables)
    step_of = [next(t for t, c in by_step.items() if solver.boolean_value(c)) for by_step in create]
    return ProblemSolution(
        step_of=step_of,
        status=solver.status_name(status),
        objective=int(solver.objective_value),
        bound=int(solver.best_objective_bound),
        seconds=seconds,
        variables=variables,
    )


def merge_edges(*edge_maps: dict[int, list[int]] | None) -> dict[int, list[int]]:
    merged: dict[int, list[int]] = {}
    for edges in edge_maps:
        for v, ws in (edges or {}).items():
            targets = merged.setdefault(v, [])
            targets.extend(w for w in ws if w not in targets)
    return merged


def _add_edges(model: cp_model.CpModel, create: list[dict[int, cp_model.IntVar]],
               edges: dict[int, list[int]]) -> None:
    """Precedence edges without a tensor (control / read-before-update): step(v) < step(w)."""
    step = [sum(t * c for t, c in by_step.items()) for by_step in create]
    for v, ws in edges.items():
        for w in ws:
            model.add(step[v] + 1 <= step[w])


def _add_hint(model: cp_model.CpModel, problem: LifetimeProblem, hint_steps: Sequence[int],
              create: list[dict[int, cp_model.IntVar]],
              preserves: list[dict[int, cp_model.IntVar | int]]) -> None:
    """Hint a full solution: C from the hinted steps, P from the lifetimes they imply."""
    for v, by_step in enumerate(create):
        for t, c in by_step.items():
            model.add_hint(c, t == hint_steps[v])
    for tensor, preserve in zip(problem.tensors, preserves, strict=True):
        born = -1 if tensor.producer is None else hint_steps[tensor.producer]
        reads = [hint_steps[r] for r in tensor.readers]
        until = problem.steps - 1 if tensor.to_end else max(reads, default=born)
        for t, p in preserve.items():
            if not isinstance(p, int):
                model.add_hint(p, born < t <= until)


def _preserve_vars(model: cp_model.CpModel, tensor: ProblemTensor,
                   create: list[dict[int, cp_model.IntVar]], problem: LifetimeProblem
                   ) -> dict[int, cp_model.IntVar | int]:
    """P[e, t] over MUL(e) with PRES(e) fixed, and eq. 1, 2 and 4 for one tensor.

    Returns the variables by step (the constant 1 on PRES).
    """
    asap, alap, depth = problem.asap, problem.alap, problem.steps
    readers = tensor.readers
    if tensor.producer is None:  # resident from before step 0, at least at step 0
        born, fixed_from = -1, 0
        fixed_until = max((asap[r] for r in readers), default=0)
    else:
        born, fixed_from = asap[tensor.producer], alap[tensor.producer] + 1
        fixed_until = max((asap[r] for r in readers), default=-1)
    last = depth - 1 if tensor.to_end else max((alap[r] for r in readers), default=-1)
    if tensor.producer is None:
        last = max(last, 0)
    if tensor.to_end:
        fixed_until = depth - 1
    preserve: dict[int, cp_model.IntVar | int] = {}
    for t in range(born + 1, last + 1):
        if fixed_from <= t <= fixed_until:
            preserve[t] = 1  # eq. 12 (PRES)
        else:
            preserve[t] = model.new_bool_var(f"P_{t}")
    made = create[tensor.producer] if tensor.producer is not None else {}
    for t, p in preserve.items():
        previous = preserve.get(t - 1, 1 if tensor.producer is None and t == 0 else 0)
        created_before = made.get(t - 1, 0)
        if not all(isinstance(x, int) for x in (p, previous, created_before)):
            model.add(p <= previous + created_before)  # eq. 2, also into a pinned PRES level
        if t in made:
            model.add(p + made[t] <= 1)  # eq. 1
    for reader in readers:  # eq. 4: an op's inputs are resident when it runs
        for t, c in create[reader].items():
            p = preserve.get(t, 0)
            if isinstance(p, int):
                if p == 0:
                    model.add(c == 0)
            else:
                model.add_implication(c, p)
    if tensor.to_end and tensor.producer is not None:
        end = preserve.get(depth - 1, 0)
        model.add(end + made.get(depth - 1, 0) == 1)  # outputs survive to the end
    return preserve
