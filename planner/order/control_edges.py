"""OLLA §4.3 "enforcing early memory deallocations": control edges that make updates run early.

A weight (or optimizer-state) update frees the gradient it consumes, so running it late only
costs memory. OLLA adds a zero-byte control edge from each update node to an "anchor" that is
scheduled early anyway; the edge caps the update's ALAP level below the anchor's, which shrinks the
lifetime model. This is a search-space restriction, not an optimality-preserving reduction:
callers can switch it off.

Anchor search (our own rendering of the paper's idea): walk back from the update node through
the producers of its inputs, one ring at a time; in each ring, look at the other readers of what
those producers made, keep the ones whose ASAP level exceeds the update's (an edge to them cannot
close a cycle: ancestors always have smaller levels), and take the one farthest from the sinks
(the earliest to run). The first ring with a candidate decides.
"""

from __future__ import annotations

from planner.ir.graph import Graph, TensorRole
from planner.order.heuristics import levelize

UPDATED_ROLES = (TensorRole.PARAMETER, TensorRole.OPTIMIZER_STATE)


def update_nodes(graph: Graph) -> list[int]:
    """Ops writing the new value of a parameter or optimizer state."""
    nodes = {
        graph.tensors[t.updated_by].producer
        for t in graph.tensors
        if t.role in UPDATED_ROLES and t.updated_by is not None
    }
    return sorted(n for n in nodes if n is not None)


def early_update_edges(graph: Graph) -> dict[int, list[int]]:
    """Control edges update node -> anchor, as described in the module docstring."""
    asap, alap = levelize(graph)
    edges: dict[int, list[int]] = {}
    for v in update_nodes(graph):
        visited = {v}
        ring = {v}
        while ring:
            ring = {
                producer
                for op in ring
                for t in graph.ops[op].input_ids
                if (producer := graph.tensors[t].producer) is not None
            } - visited
            visited |= ring
            candidates = {
                reader
                for op in ring
                for t in graph.ops[op].output_ids
                for reader in graph.tensors[t].consumers
                if asap[reader] > asap[v] and reader not in visited
            }
            if candidates:
                # Earliest-running anchor: the smallest ALAP (farthest from the sinks).
                anchor = min(candidates, key=lambda c: (alap[c], c))
                if alap[anchor] <= alap[v]:
                    edges[v] = [anchor]
                break
    return edges
