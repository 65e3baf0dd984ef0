"""Tensor lifetimes and live bytes of a graph executed in a given sequential order.

This is the schedule memory model (planner.memory.replay) for the simplest schedule: every op
once, on one device, in the given order, each value dead after its last read; step k is the k-th
op. Ordering solvers
and heuristics, remat's reorder passes and the reports take "peak" from here:

- step k runs op `order[k]`; a tensor produced at step p is live on [p, last read];
- graph inputs (data, parameters, state) are loaded before step 0: live on [0, last read];
- graph outputs (the loss, updated state) stay live to the last step;
- a value nobody reads still occupies its bytes in the step that writes it;
- initializers (constants of the model) and state inputs are live for the whole step;
- views share their source's storage, and an elementwise op may write over an input that dies
  there (planner.memory.sharing): such a tensor adds no bytes and keeps the storage live.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from planner.ir.graph import Graph
from planner.memory.replay import replay
from planner.memory.schedule import Compute, Schedule, home_on
from planner.memory.sharing import state_updates
from planner.memory.zones import persistent_tensors


@dataclass(frozen=True)
class Lifetimes:
    """Inclusive live step ranges by tensor id, and the live bytes of every step.

    `alias` maps a tensor sitting in another tensor's bytes (a view, an in-place write) to the
    tensor that owns them; those bytes are counted once, over the storage's whole life.
    """

    first: dict[int, int]
    last: dict[int, int]
    live_bytes: tuple[int, ...]
    alias: dict[int, int]  # tensor -> the tensor owning the storage it sits in

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
    home = home_on(graph, "cpu")  # steps are op positions: frees change nothing here
    walk = replay(graph, Schedule(tuple(Compute(op, "cpu") for op in order), home))
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for m in walk.materializations:
        first[m.tensor], last[m.tensor] = walk.live_range(m)
    alias = {m.tensor: m.owner.tensor for m in walk.materializations if m.storage is not None}
    live = walk.live_bytes().get("cpu", [0] * walk.n_steps)
    return Lifetimes(first=first, last=last, live_bytes=tuple(live), alias=alias)
def aliases_in_order(graph: Graph, order: Sequence[int]) -> dict[int, int]:
    """Updated output -> state input, for the in-place updates that running `order` allows."""
    alias = lifetimes(graph, order).alias
    return {new: state for new, state in state_updates(graph).in_place.items()
            if alias.get(new) == state}


def order_lower_bound(graph: Graph) -> int:
    """Live bytes that no order can avoid at some step (the op-footprint bound), computed once
    per graph (the request check, ordering and remat each ask; 0.4 s on 20,000 ops).

    Constants and state are live throughout. On top of that: every op needs its other inputs
    and outputs at once; all other graph inputs are live at step 0; all graph outputs that are
    not in-place state updates are live at the last step. Bytes are counted per storage: a view
    adds nothing to its source, a value of a state's update chain nothing at all (it may sit in
    the state's storage), and an output that may be written over one of its op's inputs
    (planner.memory.sharing) adds nothing to that op's footprint.
    """
    bound = _LOWER_BOUNDS.get(graph)
    if bound is None:
        bound = _LOWER_BOUNDS[graph] = _op_footprint_bound(graph)
    return bound


_LOWER_BOUNDS: weakref.WeakKeyDictionary[Graph, int] = weakref.WeakKeyDictionary()


def _op_footprint_bound(graph: Graph) -> int:
    """See order_lower_bound. (View roots, sizes and the outputs that may be written over an
    input are looked up once, not per op.)"""
    sharing = state_updates(graph)
    always = persistent_tensors(graph)
    size = [t.nbytes for t in graph.tensors]
    baseline = sum(size[t] for t in always)
    protected = {t for t in graph.inputs if t not in sharing.persistent}
    uncounted = always | sharing.in_state
    root = {view: sharing.view_root(view) for view in sharing.view_source}

    def transient_bytes(ids: Iterable[int]) -> int:
        return sum(size[t] for t in {root.get(t, t) for t in ids} - uncounted)

    overwrites = {output for output, inputs in sharing.candidates.items()
                  if {root.get(x, x) for x in inputs} - always - protected}
    footprint = max((transient_bytes([*op.input_ids,
                                      *(t for t in op.output_ids if t not in overwrites)])
                     for op in graph.ops), default=0)
    return baseline + max(transient_bytes(graph.inputs), transient_bytes(graph.outputs), footprint)
