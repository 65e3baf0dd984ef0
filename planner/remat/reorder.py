"""Move ops that are never recomputed closer to their data before rematerialization.

An order chosen for the lowest keep-everything peak (planner.order) may place backward and
optimizer ops anywhere that costs nothing at that peak: a weight gradient computed early and held
until a late parameter update, momentum * 0.9 computed long before it is used. Once recomputation
lowers the forward peak, such long-held values become the floor of every budget. Two passes over
the ops that are never recomputed (both keep the order topological and every in-place update
after the last read of its state):

- `hoist`: move an op to just after the last op it depends on when the inputs it reads last
  (freed earlier) weigh at least as much as its outputs (held longer); a parameter update writes
  over its state, so hoisting it frees the gradient at no cost;
- `sink`: move an op to just before its first reader (or the update it must precede) when its
  outputs (held shorter) weigh at least as much as the inputs it reads last (held longer).

A pass whose result has a higher keep-everything peak (planner.memory.liveness) is discarded.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

from planner.ir.graph import Graph
from planner.memory.liveness import lifetimes
from planner.memory.sharing import state_updates


def tighten_order(graph: Graph, order: Sequence[int], movable: Collection[int],
                  floor: int = 0) -> list[int]:
    """`order` after `hoist` then `sink` of the ops in `movable` (see the module doc); no op is
    hoisted before position `floor` (the end of the forward phase, where the peak usually is)."""
    return sink_fixed_ops(graph, hoist_fixed_ops(graph, order, movable, floor), movable)


def _producers(graph: Graph, tensors: Iterable[int]) -> set[int]:
    """The ops that produce `tensors` (graph inputs and initializers have none)."""
    return {op for t in tensors if (op := graph.tensors[t].producer) is not None}


def _free_bytes(graph: Graph, tensor: int, persistent: frozenset[int]) -> bool:
    """Bytes held for the whole step anyway: constants, state and in-place state updates."""
    t = graph.tensors[tensor]
    if t.producer is None:
        return t.is_initializer or tensor in persistent
    return tensor in state_updates(graph).in_place


def hoist_fixed_ops(graph: Graph, order: Sequence[int], movable: Collection[int],
                    floor: int = 0) -> list[int]:
    """`order` with the ops in `movable` hoisted towards their inputs (see the module doc)."""
    updates = state_updates(graph)
    must_follow: dict[int, set[int]] = {}  # update op -> readers of its state
    for reader, ups in updates.edges.items():
        for u in ups:
            must_follow.setdefault(u, set()).add(reader)
    seq = list(order)
    movable = set(movable)
    aliased = set(updates.in_place)
    limit = lifetimes(graph, order).peak
    curve = list(lifetimes(graph, order).live_bytes)  # an upper bound, kept as ops move
    for op_id in list(order):
        if op_id not in movable:
            continue
        op = graph.ops[op_id]
        position = {o: k for k, o in enumerate(seq)}
        here = position[op_id]
        before = _producers(graph, op.input_ids)
        before |= must_follow.get(op_id, set())
        # Producers that read only state / constants and feed only this op move along with it.
        along = sorted(
            (q for q in before
             if q in movable and q not in must_follow
             and all(_free_bytes(graph, t, updates.persistent) for t in graph.ops[q].input_ids)
             and all(set(graph.tensors[t].consumers) == {op_id}
                     for t in graph.ops[q].output_ids)
             and all(u == op_id or position[u] > here for u in updates.edges.get(q, ()))),
            key=position.__getitem__,
        )
        anchors = before - set(along)
        for q in along:
            anchors |= _producers(graph, graph.ops[q].input_ids)
        target = max([floor - 1, *(position[b] for b in anchors)]) + 1
        if target >= here:
            continue
        along_outputs = {t for q in along for t in graph.ops[q].output_ids}
        out_bytes = sum(graph.tensors[t].nbytes for t in op.output_ids if t not in aliased)
        freed = sum(graph.tensors[t].nbytes for t in op.input_ids
                    if t not in along_outputs
                    and not _free_bytes(graph, t, updates.persistent)
                    and not graph.tensors[t].is_graph_output
                    and max(position[c] for c in graph.tensors[t].consumers) == here)
        if freed < out_bytes or max(curve[target:here + 1]) + out_bytes > limit:
            continue
        moving = [*along, op_id]
        for q in moving:
            seq.remove(q)
        at = target - sum(1 for q in along if position[q] < target)
        seq[at:at] = moving
        for k in range(target, here + 1):
            curve[k] += out_bytes
    if lifetimes(graph, seq).peak > lifetimes(graph, order).peak:
        return list(order)
    return seq


def sink_fixed_ops(graph: Graph, order: Sequence[int], movable: Collection[int]) -> list[int]:
    """`order` with the ops in `movable` sunk towards their first reader (see the module doc)."""
    updates = state_updates(graph)
    before_update = {reader: set(ups) for reader, ups in updates.edges.items()}
    seq = list(order)
    movable = set(movable)
    outputs = set(graph.outputs)
    for op_id in reversed(list(order)):
        if op_id not in movable:
            continue
        op = graph.ops[op_id]
        if any(t in outputs for t in op.output_ids) or not op.output_ids:
            continue
        position = {o: k for k, o in enumerate(seq)}
        here = position[op_id]
        readers = {c for t in op.output_ids for c in graph.tensors[t].consumers}
        readers |= before_update.get(op_id, set())
        if not readers:
            continue
        target = min(position[c] for c in readers) - 1
        if target <= here:
            continue
        out_bytes = sum(graph.tensors[t].nbytes for t in op.output_ids)
        extended = 0
        for t in op.input_ids:
            if _free_bytes(graph, t, updates.persistent) or graph.tensors[t].is_graph_output:
                continue
            if max(position[c] for c in graph.tensors[t].consumers) == here:
                extended += graph.tensors[t].nbytes
        if extended > out_bytes:
            continue
        seq.pop(here)
        seq.insert(target, op_id)
    if lifetimes(graph, seq).peak > lifetimes(graph, order).peak:
        return list(order)
    return seq
