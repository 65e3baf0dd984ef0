"""The one topological sort: how ops get their ids, shared by the planner and the runtime.

A plan names ops by their position in this order, so the planner (planner.ir) and the runtime
(runtime.model) must sort a model's nodes identically; both call `topological_order`. Among the
nodes that are ready, the smallest index runs first (Kahn's algorithm with a min-heap), so a
graph that is already sorted keeps its file order and any other gets the same order every time.
A cycle raises `graphlib.CycleError`, whose second argument lists one cycle in dataflow
direction (each node an immediate predecessor of the next; the first node repeated at the end).
"""

from __future__ import annotations

import graphlib
import heapq
from collections.abc import Collection, Sequence

CycleError = graphlib.CycleError


def topological_order(predecessors: Sequence[Collection[int]]) -> list[int]:
    """Node ids 0..n-1 with every node after its `predecessors[node]`, smallest ready id first."""
    n = len(predecessors)
    successors: list[list[int]] = [[] for _ in range(n)]
    missing = [0] * n
    for node, preds in enumerate(predecessors):
        distinct = set(preds)
        missing[node] = len(distinct)
        for p in distinct:
            successors[p].append(node)
    ready = [node for node in range(n) if missing[node] == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        node = heapq.heappop(ready)
        order.append(node)
        for s in successors[node]:
            missing[s] -= 1
            if missing[s] == 0:
                heapq.heappush(ready, s)
    if len(order) < n:
        stuck = {node: [p for p in predecessors[node] if missing[p] > 0]
                 for node in range(n) if missing[node] > 0}
        graphlib.TopologicalSorter(stuck).prepare()  # raises CycleError naming a cycle
        raise AssertionError("unreachable: stuck nodes always contain a cycle")
    return order


def dataflow_order(nodes: Sequence[tuple[Sequence[str], Sequence[str]]]) -> list[int]:
    """`topological_order` of nodes given as (input names, output names): a node follows the
    producers of its inputs. A node reading its own output is not an edge here (callers that
    must refuse it check it themselves); '' names an omitted optional input or output."""
    producer: dict[str, int] = {}
    for index, (_, outputs) in enumerate(nodes):
        for name in outputs:
            if name:
                producer[name] = index
    return topological_order([
        sorted({producer[n] for n in inputs if n in producer and producer[n] != index})
        for index, (inputs, _) in enumerate(nodes)
    ])
