"""Exact re-ordering of windows around the peak: OLLA's model where the whole graph is too big.

The full sequential lifetime model grows with (ops x span) and does not even presolve within
seconds beyond a few hundred ops. But a window of consecutive steps of a given order can be
re-ordered on its own: with every op outside the window fixed in place, the set of live
storages at any step outside the window does not depend on how the window is ordered, so

    new peak = max(peak outside the window, optimum of the window problem).

Each round takes the step of the current peak, solves the window around it (the sequential
model of planner.order.olla_ilp, warm-started from the current order, at most
`window_time_limit` seconds). The window model sees storage as the memory model does for the
current order, exactly: a view's readers keep its source's bytes, and each in-place write the
current order makes stays possible (every other reader of the bytes it overwrites keeps running
first), taking no bytes of its own (a state's update chain) or none in the step that writes it.
In-place writes that another order would newly allow are not seen, and the replay may choose
among several inputs differently, so every window found is measured with the memory model
(planner.memory.liveness) and kept only when the peak drops, or stays with fewer steps at it.
When no window around a peak step improves, windows grow; it stops at the time limit, at
`target` bytes, or when a window reaches `max_window` ops.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from planner.ir.graph import Graph
from planner.memory.liveness import Lifetimes, lifetimes
from planner.memory.sharing import state_updates
from planner.memory.zones import persistent_tensors
from planner.order.olla_ilp import (
    LifetimeProblem,
    ProblemTensor,
    solve_lifetime_problem,
    spans_from_successors,
)

# Below this many seconds left no window model is built, however small: it could not even be
# presolved.
_WINDOW_FLOOR_S = 0.05


def refine_order(
    graph: Graph,
    order: Sequence[int],
    *,
    window: int = 32,
    time_limit: float = 10.0,
    window_time_limit: float = 1.0,
    target: int = 0,
    max_window: int | None = None,
    workers: int = 1,
    seed: int = 0,
) -> tuple[list[int], int]:
    """Improve `order` window by window; returns the order and how many windows improved it.

    When no window of the current size improves any peak step, the window and its time cap
    double (bigger windows see more, cost more), up to `max_window` ops (default: the graph).
    """
    deadline = time.perf_counter() + time_limit
    current = list(order)
    widest = len(current) if max_window is None else min(max_window, len(current))
    window = min(window, widest)
    life = lifetimes(graph, current)
    improved = 0
    tried: set[tuple[int, int, int]] = set()
    def time_for_a_window() -> bool:
        # Building a window's model takes about half its time cap, whatever is left: one that
        # cannot be built in time would only overrun the limit.
        left = deadline - time.perf_counter()
        return left > max(_WINDOW_FLOOR_S, window_time_limit / 2)

    while life.peak > target and time_for_a_window():
        progress = False
        for start, stop in _windows_at_peak(life, window, len(current)):
            if (start, stop, life.peak) in tried or not time_for_a_window():
                continue
            remaining = deadline - time.perf_counter()
            tried.add((start, stop, life.peak))
            candidate = _solve_window(graph, current, life, start, stop,
                                      min(remaining, window_time_limit), workers, seed)
            if candidate is None:
                continue
            measured = lifetimes(graph, candidate)
            if _height(measured) < _height(life):
                current, life, improved, progress = candidate, measured, improved + 1, True
                break
        if not progress:
            if window >= widest:
                break
            window, window_time_limit = min(window * 2, widest), window_time_limit * 2
    return current, improved


def _windows_at_peak(life: Lifetimes, window: int, n: int) -> list[tuple[int, int]]:
    """The window of `window` steps centred on each step at the peak."""
    peak = life.peak  # a max over every step: taken once (per step, 4.4 s on 20,000 ops)
    starts = (min(max(0, k - window // 2), max(0, n - window))
              for k, live in enumerate(life.live_bytes) if live == peak)
    return [(start, min(n, start + window)) for start in dict.fromkeys(starts)]


def _height(life: Lifetimes) -> tuple[int, int]:
    """What a window must lower: the peak, then how many steps reach it."""
    return life.peak, life.live_bytes.count(life.peak)


def _solve_window(graph: Graph, order: Sequence[int], life: Lifetimes, start: int, stop: int,
                  time_limit: float, workers: int, seed: int) -> list[int] | None:
    """Re-order order[start:stop] exactly; return the new order if the window model's maximum
    dropped (the caller measures it with the memory model)."""
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
    """The lifetime problem of order[start:stop] with everything else fixed (module doc).

    One problem tensor per storage a view chain shares (its root); constants and state, and
    storages the window does not touch but that are live across all of it, are its baseline."""
    ops = list(order[start:stop])
    local = {op: i for i, op in enumerate(ops)}
    position = {op: k for k, op in enumerate(order)}
    sharing = state_updates(graph)
    persistent = persistent_tensors(graph)
    # Where the current order writes in place (views aside): over a state (its update chain,
    # no bytes of its own) or over a dying input (no bytes in the step that writes it).
    in_place = {t: owner for t, owner in life.alias.items() if t not in sharing.view_source}
    views: dict[int, list[int]] = {}
    for t in graph.tensors:
        views.setdefault(sharing.view_root(t.id), []).append(t.id)

    # Every storage takes at least a byte, as in the memory model (the arena gives every buffer
    # an address).
    nbytes = [max(t.nbytes, 1) for t in graph.tensors]
    baseline = sum(nbytes[t] for t in persistent)
    tensors = []
    for root, shared in views.items():
        if root in persistent:
            continue
        tensor = graph.tensors[root]
        size = 0 if in_place.get(root) in persistent else nbytes[root]
        readers = {c for t in shared for c in graph.tensors[t].consumers}
        if tensor.producer not in local and not readers & local.keys():
            # Not moved by the window: counts iff its storage is live across all of it.
            last = max(life.last[t] for t in shared)
            if life.first[root] <= start and last >= stop - 1:
                baseline += size
            continue
        tensors.append(ProblemTensor(
            size=size,
            producer=local.get(tensor.producer) if tensor.producer is not None else None,
            readers=tuple(sorted(local[c] for c in readers if c in local)),
            to_end=any(graph.tensors[t].is_graph_output for t in shared)
            or any(position[c] >= stop for c in readers),
            free_when_written=root in in_place,
        ))

    edges: dict[int, set[int]] = {}
    for before, after in [*_pairs(sharing.edges), *_in_place_pairs(graph, life),
                          *_pairs(view_read_edges(graph))]:
        if before in local and after in local:
            edges.setdefault(local[before], set()).add(local[after])
    successors: list[set[int]] = [set() for _ in ops]
    for op in ops:
        for out in graph.ops[op].output_ids:
            successors[local[op]].update(local[c] for c in graph.tensors[out].consumers
                                         if c in local)
    for v, ws in edges.items():
        successors[v] |= ws
    asap, alap = spans_from_successors([sorted(s) for s in successors])
    steps = len(ops)
    problem = LifetimeProblem(
        steps=steps, asap=asap, alap=alap, one_op_per_step=True, tensors=tensors,
        baseline=[baseline] * steps, edges={v: sorted(ws) for v, ws in edges.items()},
    )
    return problem, ops


def view_read_edges(graph: Graph) -> dict[int, list[int]]:
    """Op writing a view -> the ops reading it. A view is no lifetime-problem tensor of its own
    (it is its root's storage), so without these edges the model would lose that order."""
    sharing = state_updates(graph)
    edges: dict[int, list[int]] = {}
    for view in sharing.view_source:
        readers = graph.tensors[view].consumers
        if readers:
            edges.setdefault(graph.tensors[view].known_producer, []).extend(readers)
    return edges


def _pairs(edges: dict[int, list[int]]) -> list[tuple[int, int]]:
    return [(v, w) for v, ws in edges.items() for w in ws]


def _in_place_pairs(graph: Graph, life: Lifetimes) -> list[tuple[int, int]]:
    """(reader, writer) for every in-place write of the order `life` measures: each reader of
    the bytes a value is written over runs before the op that writes it."""
    view_source = state_updates(graph).view_source
    storage: dict[int, list[int]] = {}
    for t, owner in life.alias.items():
        storage.setdefault(owner, [owner]).append(t)
    pairs: list[tuple[int, int]] = []
    for owner, members in storage.items():
        for w in members:
            writer = graph.tensors[w].producer
            if w == owner or w in view_source or writer is None:
                continue
            older = [m for m in members if m == owner or life.first[m] < life.first[w]]
            pairs.extend((r, writer) for m in older for r in graph.tensors[m].consumers
                         if r != writer)
    return pairs
