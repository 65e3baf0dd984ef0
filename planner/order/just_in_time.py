"""Move ops later, to right before their first use, wherever that costs no memory.

A pass over any order (planner.order.heuristics runs it after its list schedulers): exporters
compute weight transposes, casts and the transposed activations of weight gradients in the
forward pass, where they sit in memory across the peak for nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from planner.ir.graph import Graph
from planner.memory.sharing import state_updates
from planner.memory.zones import outlives_step

# How many producers up a chain an op may take along when it moves (each read only by the next:
# the Adam update of a weight, sqrt(v) -> + eps -> m / . -> * lr, waits for the weight's last
# reader as a whole, or its first temporary is held until then).
CHAIN_DEPTH = 8


def just_in_time(graph: Graph, order: Sequence[int]) -> list[int]:
    """`order` with ops moved later, to right before the first op that needs them, wherever
    that costs nothing.

    An op may move when every storage it reads is held all step anyway (a constant, state, a
    graph output such as a state's new value) or is read after the new place anyway (by another
    op, a view's reader included), or is made by an op read by it alone that can move along
    (up to CHAIN_DEPTH producers up): then moving shortens the life of what it writes and
    lengthens nothing, and an in-place write by a later reader of the same bytes stays possible.
    Ops keep `order`'s order otherwise; a moved op runs when its first successor (a reader of
    its outputs or a read-before-update edge) is about to, after its own moved predecessors.
    Later ops are decided first, so a chain of movable ops moves as one.

    GPT-2-tiny with Adam: each weight's update temporaries (16 KB) sat across the backward ops
    that still read the weight, and across every recomputation the eviction simulation put
    there. Moved to the update, the keep-everything arena went 755,264 -> 738,880 B and the
    least peak the remat search reaches 501,056 -> 476,224 B.
    """
    sharing = state_updates(graph)
    held = outlives_step(graph)
    fixed = held | {sharing.view_root(t) for t in held}
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

    def followers(op_id: int, target: int, depth: int) -> set[int] | None:
        """The ops that move to `target` with `op_id` (itself included, and the producers of
        inputs that only it reads, which would otherwise be held longer), or None when moving
        there lengthens the life of something."""
        group = {op_id}
        for t in graph.ops[op_id].input_ids:
            root = sharing.view_root(t)
            if root in fixed or read_by_others_until(root, op_id) >= target:
                continue
            producer = graph.tensors[root].producer
            if (depth == 0 or producer is None or producer in moved
                    or set(successors[producer]) != {op_id} or root != t):
                return None
            upstream = followers(producer, target, depth - 1)
            if upstream is None:
                return None
            group |= upstream
        return group

    for op_id in reversed(order):
        if not successors[op_id] or op_id in moved:
            continue
        target = min(due[c] for c in successors[op_id])
        if target <= position[op_id]:
            continue
        group = followers(op_id, target, CHAIN_DEPTH)
        if group is not None:
            moved |= group
            for member in group:
                due[member] = target
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


