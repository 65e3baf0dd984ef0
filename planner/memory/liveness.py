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

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from planner.ir.graph import Graph
from planner.memory.sharing import aliases_in_order, state_updates


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


def persistent_tensors(graph: Graph) -> frozenset[int]:
    """Constants and state: held for the whole step, whatever the order or schedule."""
    return state_updates(graph).persistent | {t.id for t in graph.tensors if t.is_initializer}


def outlives_step(graph: Graph) -> frozenset[int]:
    """Tensors never freed within a step: constants, state and graph outputs."""
    return persistent_tensors(graph) | {t.id for t in graph.tensors if t.is_graph_output}


def live_curve(ranges: Iterable[tuple[int, int, int]], n_steps: int) -> list[int]:
    """Bytes live at each of `n_steps` steps, given (first, last, bytes) with inclusive ranges
    (a last step past the end counts to the end): the one sum every peak is taken from."""
    delta = [0] * (n_steps + 1)
    for first, last, nbytes in ranges:
        delta[first] += nbytes
        delta[min(last, n_steps - 1) + 1] -= nbytes
    live, running = [], 0
    for k in range(n_steps):
        running += delta[k]
        live.append(running)
    return live


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
    alias = aliases_in_order(graph, order)
    whole_step = persistent_tensors(graph) | set(alias)
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for t in graph.tensors:
        if t.id in whole_step:
            first[t.id], last[t.id] = 0, end
            continue
        start = 0 if t.producer is None else position[t.producer]
        reads = [position[c] for c in t.consumers]
        stop = end if t.is_graph_output else max(reads, default=start)
        first[t.id], last[t.id] = start, max(stop, start)
    live = live_curve(((first[t.id], last[t.id], t.nbytes) for t in graph.tensors
                       if t.id not in alias), n)
    return Lifetimes(first=first, last=last, live_bytes=tuple(live), alias=alias)


def order_lower_bound(graph: Graph) -> int:
    """Live bytes that no order can avoid at some step.

    Constants and state are live throughout. On top of that: every op needs its other inputs
    and outputs at once; all other graph inputs are live at step 0; all graph outputs that are
    not in-place state updates are live at the last step.
    """
    always = persistent_tensors(graph)
    free_of_charge = always | set(state_updates(graph).in_place)
    baseline = sum(graph.tensors[t].nbytes for t in always)

    def transient_bytes(ids: Iterable[int]) -> int:
        return sum(graph.tensors[t].nbytes for t in set(ids) - free_of_charge)

    footprint = max(
        (transient_bytes([*op.input_ids, *op.output_ids]) for op in graph.ops), default=0
    )
    return baseline + max(transient_bytes(graph.inputs), transient_bytes(graph.outputs), footprint)
