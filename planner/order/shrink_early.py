"""Move ops that make a large value only to shrink it at once to where few bytes are live.

Exporters compute some large temporaries far from where they are made cheap: torch's max-pool
backward takes a MaxPool with indices over the whole input (two outputs of the input's size,
the indices in int64) only to slice one index per channel out of them, and an ONNX Runtime
rewrite of the graph may put that pair at the end of the forward pass, on top of every saved
activation (the peak of ResNet-18 with momentum, and of cnn_bn_momentum's extended graph).

A shrinking group is an op X with its readers R, where every reader takes only X's outputs
besides values made before (constants, state, anything X does not precede) and writes at most
1/SHRINK of X's output bytes. The group can run anywhere after the last maker of its outside
inputs and before the first reader of what it writes; this pass runs it, at the latest where it
is now, at the step of that range where the order holds the fewest live bytes, so its large
temporaries sit on the smallest live set and its small results live a little longer. The order
is otherwise kept. It is a candidate among the quick orders (planner.order.optimize measures
it with the memory model like any other), not a claim that it is better.
"""

from __future__ import annotations

from collections.abc import Sequence

from planner.ir.graph import Graph
from planner.memory.sharing import state_updates

# A reader shrinks X's outputs when it writes at most this fraction of their bytes.
SHRINK = 16


def shrink_early(graph: Graph, order: Sequence[int], live: Sequence[int]) -> list[int] | None:
    """`order` (whose live bytes per step are `live`) with every shrinking group moved to the
    emptiest step it may run at, or None when no group moves."""
    tensors = graph.tensors
    position = {op: k for k, op in enumerate(order)}
    pinned = _state_ops(graph)
    anchor: dict[int, int] = {}  # moved op -> the step it now runs right before
    for x in order:
        group = _group(graph, x, pinned | set(anchor))
        if group is None:
            continue
        after = max((position[p] for op in group for t in graph.ops[op].input_ids
                     if (p := tensors[t].producer) is not None and p not in group),
                    default=-1)
        steps = [k for k in range(after + 1, position[x] + 1) if order[k] not in anchor]
        if not steps:
            continue
        best = min(steps, key=lambda k: (live[k], k))
        if live[best] < live[position[x]]:
            for op in group:
                anchor[op] = best
    if not anchor:
        return None
    key = {op: (anchor[op], 0, k) if op in anchor else (k, 1, k) for k, op in enumerate(order)}
    return sorted(order, key=key.__getitem__)


def _group(graph: Graph, x: int, taken: set[int]) -> list[int] | None:
    """[x, *its readers] when they form a shrinking group none of whose ops is in `taken`."""
    tensors = graph.tensors
    op = graph.ops[x]
    outputs = set(op.output_ids)
    made = sum(tensors[t].nbytes for t in outputs)
    readers = sorted({c for t in outputs for c in tensors[t].consumers})
    if x in taken or not readers or made == 0 or any(tensors[t].is_graph_output for t in outputs):
        return None
    for r in readers:
        reader = graph.ops[r]
        if r in taken or SHRINK * sum(tensors[t].nbytes for t in reader.output_ids) > made:
            return None
        if any(tensors[t].producer in readers for t in reader.input_ids):
            return None  # readers reading each other: kept where they are
    return [x, *readers]


def _state_ops(graph: Graph) -> set[int]:
    """Ops a state's update ordering involves (read-before-update edges): never moved."""
    edges = state_updates(graph).edges
    return set(edges) | {w for ws in edges.values() for w in ws}
