"""Fast operator orders: the file order and a memory-aware list scheduler.

They are the fallback when the exact ordering model times out, and the baseline it is measured
against (the file order is what ONNX Runtime executes).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

from planner.ir.graph import Graph
from planner.memory.liveness import outlives_step
from planner.memory.sharing import state_updates
from schemas.topology import CycleError, topological_order


def file_order(graph: Graph) -> list[int]:
    return [op.id for op in graph.ops]


def memory_greedy_order(graph: Graph) -> list[int]:
    """List scheduling: among ready ops, run the one that grows live bytes least.

    An op's growth is the bytes it allocates minus the bytes of inputs it is the last reader
    of. Graph outputs, constants and persistent state are never freed, and a state update
    written in place allocates nothing. Ties go to the earlier op in the file. Weight updates
    free their gradient and so run as soon as they are ready (OLLA's "early weight update"),
    but only after every other reader of the old state (planner.memory.sharing' edges).
    """
    return _list_schedule(graph, lambda growth, op_id: (growth, op_id))


def eager_free_order(graph: Graph) -> list[int]:
    """The file order, except that a ready op which frees at least what it allocates runs first.

    Keeps the exporter's (usually depth-first) structure, which pure growth-greedy scheduling
    loses, while still pulling weight updates and other freeing ops forward.
    """
    return _list_schedule(graph, lambda growth, op_id: (growth > 0, growth if growth <= 0 else 0,
                                                        op_id))


def _list_schedule(graph: Graph, priority: Callable[[int, int], tuple]) -> list[int]:
    """Run the ready op with the smallest `priority(growth, op_id)` until all ops ran."""
    tensors = graph.tensors
    updates = state_updates(graph)
    never_freed = outlives_step(graph)
    remaining_readers = [len(t.consumers) for t in tensors]
    waiting_for = [0] * len(graph.ops)
    successors: list[list[int]] = [[] for _ in graph.ops]
    for v, ws in updates.edges.items():
        for w in ws:
            successors[v].append(w)
            waiting_for[w] += 1
    for op in graph.ops:
        for t in op.input_ids:
            if tensors[t].producer is not None:
                waiting_for[op.id] += 1

    allocated = [
        sum(tensors[t].nbytes for t in op.output_ids if t not in updates.in_place)
        for op in graph.ops
    ]
    freeable = [[t for t in op.input_ids if t not in never_freed] for op in graph.ops]

    def priority_of(op_id: int) -> tuple:
        freed = sum(tensors[t].nbytes for t in freeable[op_id] if remaining_readers[t] == 1)
        return priority(allocated[op_id] - freed, op_id)

    # Priorities of ready ops, refreshed only when one of their inputs gets its last reader.
    ready = {op.id: priority_of(op.id) for op in graph.ops if waiting_for[op.id] == 0}
    order: list[int] = []
    while ready:
        chosen = min(ready, key=ready.__getitem__)
        del ready[chosen]
        order.append(chosen)
        op = graph.ops[chosen]
        for t in op.input_ids:
            remaining_readers[t] -= 1
            if remaining_readers[t] == 1:
                for reader in tensors[t].consumers:
                    if reader in ready:
                        ready[reader] = priority_of(reader)
        released = [c for t in op.output_ids for c in tensors[t].consumers] + successors[chosen]
        for follower in released:
            waiting_for[follower] -= 1
            if waiting_for[follower] == 0:
                ready[follower] = priority_of(follower)
    return order


def levelize(graph: Graph, extra_edges: dict[int, list[int]] | None = None
             ) -> tuple[list[int], list[int]]:
    """ASAP and ALAP levels of every op (longest paths from the sources / to the sinks).

    `extra_edges` adds control edges (op -> ops that must run after it).
    """
    successors = successor_lists(graph, extra_edges)
    n = len(graph.ops)
    topo = topological_sort(successors)
    asap = [0] * n
    for v in topo:
        for w in successors[v]:
            asap[w] = max(asap[w], asap[v] + 1)
    depth = max(asap, default=-1) + 1
    to_sink = [0] * n
    for v in reversed(topo):
        for w in successors[v]:
            to_sink[v] = max(to_sink[v], to_sink[w] + 1)
    alap = [depth - 1 - d for d in to_sink]
    return asap, alap


def topological_sort(successors: list[list[int]]) -> list[int]:
    """The one topological sort (schemas.topology) over successor lists; control edges that
    close a cycle raise ValueError."""
    predecessors: list[list[int]] = [[] for _ in successors]
    for v, ws in enumerate(successors):
        for w in ws:
            predecessors[w].append(v)
    try:
        return topological_order(predecessors)
    except CycleError:
        raise ValueError("control edges created a cycle") from None


def successor_lists(graph: Graph, extra_edges: dict[int, list[int]] | None = None
                    ) -> list[list[int]]:
    successors: list[set[int]] = [set() for _ in graph.ops]
    for op in graph.ops:
        for t in op.output_ids:
            successors[op.id].update(graph.tensors[t].consumers)
    for v, ws in (extra_edges or {}).items():
        successors[v].update(ws)
    return [sorted(s) for s in successors]


def order_by_levels(graph: Graph, level_of: list[int]) -> list[int]:
    """Sequential order from a level per op: by level, ties in file order.

    Ops sharing a level never depend on each other, so any order inside a level is valid.
    """
    heap = [(level_of[op.id], op.id) for op in graph.ops]
    heapq.heapify(heap)
    return [heapq.heappop(heap)[1] for _ in range(len(heap))]
