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

from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from itertools import chain

import numpy as np

from planner.ir.graph import Graph, per_graph
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
    per graph (the request check, ordering and remat each ask).

    Constants and state are live throughout. On top of that: every op needs its other inputs
    and outputs at once; all other graph inputs are live at step 0; all graph outputs that are
    not in-place state updates are live at the last step. Bytes are counted per storage: a view
    adds nothing to its source, a value of a state's update chain nothing at all (it may sit in
    the state's storage), and an output that may be written over one of its op's inputs
    (planner.memory.sharing) adds nothing to that op's footprint.
    """
    return _footprint(graph).bound


def lower_bound_reason(graph: Graph) -> str:
    """Which step sets the op-footprint bound and of what, for a refusal to name: the bytes a
    user can change (a smaller batch, a split op) are those of that step."""
    found = _footprint(graph)
    n = len(graph.ops)
    if found.group < n:
        op = graph.ops[found.group]
        what = f"op {op.name!r} ({op.op_type}) with its inputs and outputs"
    else:
        what = "the graph inputs" if found.group == n else "the graph outputs"
    return (f"state and constants take {found.baseline} B and {what} "
            f"{found.bound - found.baseline} B more")


@dataclass(frozen=True)
class _Footprint:
    bound: int
    baseline: int  # constants and state
    group: int  # the group of most bytes: an op's index, len(ops) graph inputs, +1 outputs


@per_graph
def _footprint(graph: Graph) -> _Footprint:
    """See order_lower_bound: constants and state, plus the most that one group of values
    needs at once, a group being an op's inputs and the outputs it cannot write over one of
    them, or the graph inputs, or the graph outputs."""
    sharing = state_updates(graph)
    always = persistent_tensors(graph)
    protected = {t for t in graph.inputs if t not in sharing.persistent}
    root = {view: sharing.view_root(view) for view in sharing.view_source}
    overwrites = {output for output, inputs in sharing.candidates.items()
                  if {root.get(x, x) for x in inputs} - always - protected}
    read = _members([*(op.input_ids for op in graph.ops), graph.inputs, graph.outputs])
    written = _members([op.output_ids for op in graph.ops])  # group k: op k, as in `read`
    written = written[:, ~np.isin(written[1], list(overwrites))]
    baseline = sum(graph.tensors[t].nbytes for t in always)
    largest, group = _largest_storage_bytes(graph, np.concatenate([read, written], axis=1),
                                            root, always | sharing.in_state)
    return _Footprint(baseline + largest, baseline, group)


def _members(groups: list[Sequence[int]]) -> np.ndarray:
    """Every (group index, tensor id) of `groups`, as two rows."""
    lengths = np.fromiter(map(len, groups), dtype=np.int64, count=len(groups))
    tensors = np.fromiter(chain.from_iterable(groups), dtype=np.int64, count=int(lengths.sum()))
    return np.stack([np.repeat(np.arange(len(groups), dtype=np.int64), lengths), tensors])


def _largest_storage_bytes(graph: Graph, members: np.ndarray, root: dict[int, int],
                           uncounted: AbstractSet[int]) -> tuple[int, int]:
    """The most bytes that the distinct storages of one group's tensors (`members`: group and
    tensor rows) hold, storages in `uncounted` holding none, and that group. Vectorized: a set
    and a sum per op in Python took half as long again on 20,000 ops, and the bound is taken
    before ordering starts, on the request's clock. Bytes are summed as Python ints (an object
    array): exact for any size."""
    n = len(graph.tensors)
    storage = np.arange(n, dtype=np.int64)
    storage[list(root)] = list(root.values())
    counted = np.array([0 if t.id in uncounted else t.nbytes for t in graph.tensors],
                       dtype=object)
    pairs = np.unique(members[0] * n + storage[members[1]])  # by group, each storage once
    if not pairs.size:
        return 0, len(graph.ops)
    starts = np.flatnonzero(np.diff(pairs // n, prepend=-1))
    sums = np.add.reduceat(counted[pairs % n], starts)
    most = int(np.argmax(sums))
    return int(sums[most]), int(pairs[starts[most]] // n)
