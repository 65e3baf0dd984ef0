"""Graph coarsening: recomputable ops merged into segments that are kept or recomputed as a unit.

XEngine's and Checkmate's variables grow with the square of the node count; most of the ops of
an exported training graph are cheap elementwise or shape ops with tiny outputs (batch-norm
statistics, reshapes, unsqueezes). The recomputable ops (planner.remat.problem) are cut, in the
order they run, into contiguous segments of about equal length, each cut placed where the fewest
bytes cross it (values made before the cut and read by recomputable ops after it); ops that are
never recomputed stay nodes of their own. A segment is computed as a unit; its values are still
kept or freed individually (grouped by the nodes that read them).

Not exact: the model can no longer recompute part of a segment, nor keep an intermediate value of
a segment without computing the whole segment; the solution is optimal for the coarse problem
only. Moving the recomputable ops of a segment up to its first op is always valid (they depend
only on sources and earlier recomputable ops).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from planner.ir.graph import Graph


def segment_cuts(graph: Graph, ops: Sequence[int], segments: int) -> list[int]:
    """Indices into `ops` where new segments start (first is 0), about `segments` of them."""
    n = len(ops)
    if n == 0:
        return []
    segments = max(1, min(segments, n))
    index = {op: i for i, op in enumerate(ops)}
    crossing = [0] * (n + 1)  # crossing[i]: bytes live across the cut before ops[i]
    for i, op in enumerate(ops):
        for t in graph.ops[op].output_ids:
            readers = [index[c] for c in graph.tensors[t].consumers if c in index]
            last = max(readers, default=i)
            if last > i:
                crossing[i + 1] += graph.tensors[t].nbytes
                crossing[last + 1] -= graph.tensors[t].nbytes
    running = 0
    for i in range(n + 1):
        running += crossing[i]
        crossing[i] = running
    length = n / segments
    cuts = [0]
    while True:
        start = cuts[-1]
        ideal = start + length
        if ideal >= n - length / 2:
            break
        lo = max(start + 1, int(start + length / 2))
        hi = min(n - 1, int(start + 1.5 * length))
        if lo > hi:
            break
        best = min(range(lo, hi + 1), key=lambda i: (crossing[i], abs(i - ideal)))
        cuts.append(best)
    return cuts


def coarse_groups(graph: Graph, order: Sequence[int], recomputable: Collection[int],
                  segments: int) -> list[list[int]]:
    """Groups for planner.remat.problem.build_problem: segments of the recomputable ops (at the
    position of their first op), every other op alone, in order."""
    recomputable = set(recomputable)
    seq = [op for op in order if op in recomputable]
    cuts = segment_cuts(graph, seq, segments)
    bounds = [*cuts, len(seq)]
    groups: list[tuple[int, list[int]]] = []
    position = {op: k for k, op in enumerate(order)}
    for a, b in zip(bounds, bounds[1:], strict=False):
        members = seq[a:b]
        if members:
            groups.append((position[members[0]], members))
    groups.extend((position[op], [op]) for op in order if op not in recomputable)
    groups.sort(key=lambda pair: pair[0])
    return [members for _, members in groups]
