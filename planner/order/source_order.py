"""The exporter's order carried into ONNX Runtime's rewrite of a graph.

A rewritten graph lists its ops in ONNX Runtime's own topological order, which interleaves the
forward and backward passes differently from the exporter's: on UNet with Adam the list
schedulers that break ties by position (planner.order.list_schedule) peak 6% higher on that
order than on the model as sent (151.9 vs 144.4 MiB). The rewrite keeps the names of the ops it
does not fuse away (planner.ir.graph records their positions in the model as sent), so the
exporter's order can be rebuilt: every op at its position in the model as sent, an op ONNX
Runtime made right before its first reader (after its last input's maker when nothing reads it).
"""

from __future__ import annotations

import heapq

from planner.ir.graph import Graph


def source_ranks(graph: Graph) -> list[int] | None:
    """Each op's step in the topological order closest to the model as sent (module doc), or
    None for a graph that is the model as sent (its file order is that order)."""
    if not graph.source_positions:
        return None
    tensors = graph.tensors
    inf = float("inf")
    # Ops ONNX Runtime made take their first reader's position, less a half (readers come later
    # in the file, so one pass from the end sees them first).
    key: list[float] = [inf if p is None else p for p in graph.source_positions]
    for op in reversed(graph.ops):
        if graph.source_positions[op.id] is None:
            readers = [c for t in op.output_ids for c in tensors[t].consumers]
            key[op.id] = min(key[c] for c in readers) - 0.5 if readers else inf
    for op in graph.ops:
        if key[op.id] == inf:
            key[op.id] = max((key[p] for t in op.input_ids
                              if (p := tensors[t].producer) is not None), default=-1) + 0.5
    waiting = [sum(tensors[t].producer is not None for t in op.input_ids) for op in graph.ops]
    ready = [(key[op.id], op.id) for op in graph.ops if not waiting[op.id]]
    heapq.heapify(ready)
    rank = [0] * len(graph.ops)
    step = 0
    while ready:
        _, v = heapq.heappop(ready)
        rank[v] = step
        step += 1
        for t in graph.ops[v].output_ids:
            for c in tensors[t].consumers:
                waiting[c] -= 1
                if not waiting[c]:
                    heapq.heappush(ready, (key[c], c))
    return rank
