"""Move ops later, to right before their first use, wherever that costs no memory.

A pass over any order (planner.order.heuristics runs it after its list schedulers): exporters
compute weight transposes, casts and the transposed activations of weight gradients in the
forward pass, where they sit in memory across the peak for nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from planner.ir.graph import Graph
from planner.memory.sharing import state_updates
from planner.memory.zones import persistent_tensors


def just_in_time(graph: Graph, order: Sequence[int]) -> list[int]:
    """`order` with ops moved later, to right before the first op that needs them, wherever
    that costs nothing.

    An op may move when every storage it reads is a constant or state, or is read after the new
    place anyway (by another op, a view's reader included): then moving shortens the life of
    what it writes and lengthens nothing, and an in-place write by a later reader of the same
    bytes stays possible. Ops keep `order`'s order otherwise; a moved op runs when its first
    successor (a reader of its outputs or a read-before-update edge) is about to, after its
    own moved predecessors. Later ops are decided first, so a chain of movable ops moves as one.
    """
    sharing = state_updates(graph)
    fixed = persistent_tensors(graph)
    position = {op: k for k, op in enumerate(order)}
    successors, predecessors = _neighbours(graph)
    # The last two reads of every storage a view chain shares, by position in `order`.
    reads: dict[int, list[int]] = {}
    for op in graph.ops:
        for root in {sharing.view_root(t) for t in op.input_ids} - fixed:
            last = reads.setdefault(root, [-1, -1])
            k = position[op.id]
            if k > last[0]:
                last[:] = [k, last[0]]
            elif k > last[1]:
                last[1] = k

    def read_by_others_until(root: int, op_id: int) -> int:
        last = reads[root]
        return last[1] if last[0] == position[op_id] else last[0]

    moved: set[int] = set()
    due = position.copy()  # where each op will run: moved ops right before their first successor
    for op_id in reversed(order):
        if not successors[op_id]:
            continue
        target = min(due[c] for c in successors[op_id])
        roots = {sharing.view_root(t) for t in graph.ops[op_id].input_ids} - fixed
        if target > position[op_id] and all(read_by_others_until(r, op_id) >= target
                                            for r in roots):
            moved.add(op_id)
            due[op_id] = target
    return _emit_before_successors(order, moved, predecessors, position)


def deferred(graph: Graph, order: Sequence[int]) -> list[int]:
    """`order` with every op but a state's update chain moved to right before the first op
    that needs it, whatever that costs in keeping its inputs.

    For the eviction simulation (planner.remat.evict), not for keeping everything: an input
    kept longer can be evicted and made again, while an output made early (ONNX Runtime's
    rewrite transposes activations for a weight gradient several ops before the convolution
    that reads them) holds its bytes across the steps in between, where nothing can evict it.
    ResNet-CIFAR at persistent + 50% of its activations: the eviction schedule costs 1.16x the
    keep-everything step in this order, 1.28x in the order tuned for keeping everything. Update
    chains stay: moved later they would write in place after reads they must follow.
    """
    position = {op: k for k, op in enumerate(order)}
    successors, predecessors = _neighbours(graph)
    chains = {graph.tensors[v].producer for chain in state_updates(graph).update_chains.values()
              for v in chain}
    moved: set[int] = set()
    due = position.copy()
    for op_id in reversed(order):
        if not successors[op_id] or op_id in chains:
            continue
        target = min(due[c] for c in successors[op_id])
        if target > position[op_id]:
            moved.add(op_id)
            due[op_id] = target
    return _emit_before_successors(order, moved, predecessors, position)


def _neighbours(graph: Graph) -> tuple[list[list[int]], list[list[int]]]:
    """Per op, the ops that must run after it and those that must run before: readers of its
    outputs and read-before-update edges (planner.memory.sharing)."""
    tensors = graph.tensors
    successors: list[list[int]] = [
        [c for t in op.output_ids for c in tensors[t].consumers] for op in graph.ops
    ]
    predecessors: list[list[int]] = [
        [p for t in op.input_ids if (p := tensors[t].producer) is not None] for op in graph.ops
    ]
    for v, ws in state_updates(graph).edges.items():
        for w in ws:
            successors[v].append(w)
            predecessors[w].append(v)
    return successors, predecessors


def _emit_before_successors(order: Sequence[int], moved: set[int],
                            predecessors: list[list[int]], position: dict[int, int]
                            ) -> list[int]:
    """`order` without the `moved` ops, each of which runs right before the first op that has
    it as a predecessor (depth first, its own moved predecessors first)."""
    emitted = [False] * len(predecessors)
    result: list[int] = []

    def ahead(v: int) -> Iterable[int]:
        return iter(sorted(predecessors[v], key=position.__getitem__))

    for op_id in order:
        if op_id in moved:
            continue
        emitted[op_id] = True
        stack = [(op_id, ahead(op_id))]
        while stack:
            v, pending = stack[-1]
            for p in pending:
                if not emitted[p] and p in moved:
                    emitted[p] = True
                    stack.append((p, ahead(p)))
                    break
            else:
                stack.pop()
                result.append(v)
    return result


