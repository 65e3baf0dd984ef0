"""Memory-aware list scheduling: build an order op by op, choosing among the ready ops by what
each would allocate and free (planner.order.running_bytes).

Each ready op's effect is kept current incrementally and the choice comes from a heap, so a
schedule costs about O((ops + reads) log ops) rather than one memory-model run per choice.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Sequence

from planner.ir.graph import Graph
from planner.memory.sharing import state_updates
from planner.order.running_bytes import Effect, RunningBytes


def memory_greedy_order(graph: Graph) -> list[int]:
    """List scheduling: among ready ops, run the one that grows live bytes least.

    An op's growth is the bytes of new storage it writes minus the bytes of storage it reads
    last (planner.order.running_bytes: views and in-place writes take no new storage; constants,
    state and graph outputs are never freed). Ties go to the earlier op in the file. Weight
    updates free their gradient and so run as soon as they are ready (OLLA's "early weight
    update"), but only after every other reader of the old state (planner.memory.sharing's
    edges).
    """
    return _list_schedule(graph, lambda e, op_id: (e.growth, op_id))


def eager_free_order(graph: Graph, rank: Sequence[int] | None = None) -> list[int]:
    """The file order (or the order that gives each op its `rank`), except that a ready op
    which frees at least what it allocates runs first.

    Keeps the exporter's (usually depth-first) structure, which pure growth-greedy scheduling
    loses, while still pulling weight updates and other freeing ops forward.
    """
    place: Sequence[int] = range(len(graph.ops)) if rank is None else rank
    return _list_schedule(graph, lambda e, op_id: (e.growth > 0, min(e.growth, 0), place[op_id]))


class _ReadyOps:
    """The ready ops with their current effects, and a min-heap of (key, op) over them where an
    entry is current only while its effect is the op's current one (lazy deletion: stale
    entries are dropped when they surface)."""

    def __init__(self, key: Callable[[Effect, int], tuple]) -> None:
        self.key = key
        self.effects: dict[int, Effect] = {}
        self.heap: list[tuple[tuple, int, int, Effect]] = []
        self.pushed = itertools.count()  # breaks ties between entries of the same op

    def put(self, op_id: int, effect: Effect) -> None:
        self.effects[op_id] = effect
        heapq.heappush(self.heap, (self.key(effect, op_id), next(self.pushed), op_id, effect))

    def take(self) -> tuple[int, Effect]:
        """Remove the ready op with the smallest key and return it with its effect."""
        while True:
            _, _, op_id, effect = heapq.heappop(self.heap)
            if self.effects.get(op_id) is effect:
                del self.effects[op_id]
                return op_id, effect

    def __bool__(self) -> bool:
        return bool(self.effects)


def _list_schedule(graph: Graph, key: Callable[[Effect, int], tuple]) -> list[int]:
    """Run the ready op with the smallest `key(effect, op_id)` until all ops ran, keeping every
    ready op's effect current.

    An op's effect changes only when the pending reads of a storage it reads fall to (or rise
    from) the few reads it makes itself, so only those readers are re-evaluated."""
    tensors = graph.tensors
    running = RunningBytes(graph)
    ready = _ReadyOps(key)
    waiting_for = [0] * len(graph.ops)
    successors: list[list[int]] = [[] for _ in graph.ops]
    for v, ws in state_updates(graph).edges.items():
        for w in ws:
            successors[v].append(w)
            waiting_for[w] += 1
    for op in graph.ops:
        waiting_for[op.id] += sum(tensors[t].producer is not None for t in op.input_ids)
    # Unscheduled readers of each storage; at most `sensitive` pending reads, a reader's effect
    # may change.
    readers: dict[int, set[int]] = {}
    for t, s in running.owner.items():
        readers.setdefault(s, set()).update(tensors[t].consumers)
    sensitive = max((len(op.input_ids) for op in graph.ops), default=0)
    for op in graph.ops:
        if waiting_for[op.id] == 0:
            ready.put(op.id, running.effect(op.id))
    order: list[int] = []
    while ready:
        chosen, effect = ready.take()
        order.append(chosen)
        op = graph.ops[chosen]
        for t in op.input_ids:
            readers[running.owner[t]].discard(chosen)
        touched = running.run(chosen, effect)
        for out in op.output_ids:
            readers.setdefault(running.owner[out], set()).update(tensors[out].consumers)
        for s in set(touched):
            if running.pending[s] <= sensitive:
                for reader in readers.get(s, ()):
                    if reader in ready.effects:
                        ready.put(reader, running.effect(reader))
        for follower in [c for t in op.output_ids for c in tensors[t].consumers] + \
                successors[chosen]:
            waiting_for[follower] -= 1
            if waiting_for[follower] == 0:
                ready.put(follower, running.effect(follower))
    return order


