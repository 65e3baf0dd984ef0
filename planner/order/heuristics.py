"""Fast operator orders: the file order, list schedulers and the level helpers of the OLLA model.

`QUICK_ORDERS` are what planner.order.optimize always measures, in well under a second up to
thousands of ops: the file order (what ONNX Runtime executes, the baseline) and list schedulers
(planner.order.list_schedule) finished by moving ops that cost nothing to move to right before
their first use (planner.order.just_in_time). On ONNX Runtime's rewrite of a model, the
eager-free scheduler runs a second time breaking ties by the exporter's order
(planner.order.source_order) instead of ONNX Runtime's: neither wins on every model (UNet with
Adam: 144.4 vs 153.4 MiB; resnet_cifar: 6.13 vs 5.88 MiB), and each costs well under a second.
They are the answer when exact ordering cannot pay or runs out of time, and its warm start when
it runs.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

from planner.ir.graph import Graph
from planner.order.just_in_time import just_in_time
from planner.order.list_schedule import eager_free_order, memory_greedy_order
from planner.order.source_order import source_ranks
from schemas.topology import CycleError, topological_order


def file_order(graph: Graph) -> list[int]:
    return [op.id for op in graph.ops]


def file_just_in_time_order(graph: Graph) -> list[int]:
    """The file order with ops moved to right before their first use where that is free."""
    return just_in_time(graph, file_order(graph))


def eager_free_source_order(graph: Graph) -> list[int] | None:
    """The eager-free order breaking ties by the exporter's order; None on the model as sent
    (where that is the file order: the eager-free order already)."""
    rank = source_ranks(graph)
    return None if rank is None else just_in_time(graph, eager_free_order(graph, rank))


# By the name optimize_order reports; ties between equal peaks go to the first. None: the order
# does not apply to this graph.
QUICK_ORDERS: dict[str, Callable[[Graph], list[int] | None]] = {
    "file": file_order,
    "just_in_time": file_just_in_time_order,
    "greedy": lambda graph: just_in_time(graph, memory_greedy_order(graph)),
    "eager_free": lambda graph: just_in_time(graph, eager_free_order(graph)),
    "eager_free_source": eager_free_source_order,
}


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
