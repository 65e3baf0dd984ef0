"""Tensor lifetimes and live bytes of a graph executed in a given sequential order.

This is the one memory model every planner phase shares, so that "peak" means the same thing in
the ordering solver, the layout and the reports:

- step k runs op `order[k]`; a tensor produced at step p is live on [p, last read];
- graph inputs (data, parameters, state) are loaded before step 0: live on [0, last read];
- graph outputs (the loss, updated state) stay live to the last step;
- a value nobody reads still occupies its bytes in the step that writes it;
- initializers (constants of the model) are live for the whole step: the runtime must hold them;
- state inputs (parameters, optimizer state, buffers) are persistent: live for the whole step;
  their new value reuses their storage when planner.memory.sharing allows it and the order runs
  every other reader of the old value first (`alias`), else it is a tensor of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from planner.ir.graph import Graph
from planner.memory.sharing import state_updates


@dataclass(frozen=True)
class Lifetimes:
    """Inclusive live step ranges by tensor id, and the live bytes of every step.

    Tensors in `alias` (updated output -> state input) share the state's storage and range.
    """

    first: dict[int, int]
    last: dict[int, int]
    live_bytes: tuple[int, ...]
    alias: dict[int, int]

    @property
    def peak(self) -> int:
        return max(self.live_bytes, default=0)


def check_order(graph: Graph, order: Sequence[int]) -> None:
    """Raise ValueError unless `order` runs every op once, each after its producers."""
    if sorted(order) != list(range(len(graph.ops))):
        raise ValueError("an order must list every op exactly once")
    position = {op: k for k, op in enumerate(order)}
    for op in graph.ops:
        for t in op.input_ids:
            producer = graph.tensors[t].producer
            if producer is not None and position[producer] >= position[op.id]:
                raise ValueError(
                    f"op {op.name} runs before the producer of its input {graph.tensors[t].name}"
                )


def lifetimes(graph: Graph, order: Sequence[int]) -> Lifetimes:
    """Live ranges and the per-step live bytes of `graph` run in `order` (see module doc)."""
    n = len(order)
    position = {op: k for k, op in enumerate(order)}
    end = max(n - 1, 0)
    updates = state_updates(graph)
    alias = {
        new: state
        for new, state in updates.in_place.items()
        if all(
            position[r] <= position[graph.tensors[new].producer]
            for r in graph.tensors[state].consumers
        )
    }
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for t in graph.tensors:
        if t.is_initializer or t.id in updates.persistent or t.id in alias:
            first[t.id], last[t.id] = 0, end
            continue
        start = 0 if t.producer is None else position[t.producer]
        reads = [position[c] for c in t.consumers]
        stop = end if t.is_graph_output else max(reads, default=start)
        first[t.id], last[t.id] = start, max(stop, start)
    delta = [0] * (n + 1)
    for t in graph.tensors:
        if t.id in alias:
            continue
        delta[first[t.id]] += t.nbytes
        delta[last[t.id] + 1] -= t.nbytes
    live, running = [], 0
    for k in range(n):
        running += delta[k]
        live.append(running)
    return Lifetimes(first=first, last=last, live_bytes=tuple(live), alias=alias)


def order_lower_bound(graph: Graph) -> int:
    """Live bytes that no order can avoid at some step.

    Constants and state are live throughout. On top of that: every op needs its other inputs
    and outputs at once; all other graph inputs are live at step 0; all graph outputs that are
    not in-place state updates are live at the last step.
    """
    updates = state_updates(graph)
    always = {t.id for t in graph.tensors if t.is_initializer} | set(updates.persistent)
    free_of_charge = always | set(updates.in_place)
    baseline = sum(graph.tensors[t].nbytes for t in always)

    def transient_bytes(ids) -> int:
        return sum(graph.tensors[t].nbytes for t in set(ids) - free_of_charge)

    footprint = max(
        (transient_bytes([*op.input_ids, *op.output_ids]) for op in graph.ops), default=0
    )
    return baseline + max(transient_bytes(graph.inputs), transient_bytes(graph.outputs), footprint)
