"""In-place state updates: where an updated parameter / optimizer state can reuse its input's bytes.

A training step reads each state tensor (weights, momenta, Adam moments, running stats) and writes
its new value. Frameworks update in place; a functional ONNX graph instead keeps old and new value
as separate tensors, which is one reason ONNX Runtime needs more memory than the live bytes say
(REFERENCES.md). The new value can take over the old value's storage when:

- it is written by an elementwise op (ONNX Runtime's own planner lets those write over a dying
  input: each output element depends only on the same element of the input), with the same shape
  and type as the state, and
- every other reader of the old value runs before that op. We add these "read before update"
  precedence edges for the ordering solvers; a pair is dropped when an edge would close a cycle.

State inputs are persistent: they exist before the step and, holding the new value, after it, so
they occupy their bytes for the whole step (CalcGraph's parameter / optimizer heap zones).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from planner.ir.graph import Graph
from planner.ir.roles import ELEMENTWISE_OPS


@dataclass(frozen=True)
class StateUpdates:
    persistent: frozenset[int]  # state input tensor ids (updated_by is set)
    in_place: dict[int, int]  # updated output id -> state input id whose storage it reuses
    edges: dict[int, list[int]]  # reader op -> [update op]: read the old value first


def state_updates(graph: Graph) -> StateUpdates:
    """The analysis of `graph` (computed once per graph: every phase asks for it)."""
    analysis = _ANALYSES.get(graph)
    if analysis is None:
        analysis = _ANALYSES[graph] = _analyze(graph)
    return analysis


_ANALYSES: weakref.WeakKeyDictionary[Graph, StateUpdates] = weakref.WeakKeyDictionary()


def takes_over_storage(old_value_reads: Iterable[int], written_at: int) -> bool:
    """The in-place rule in time: an updated state may be written over its old value's storage
    only when every read of the old value comes at or before the step that writes it."""
    return all(read <= written_at for read in old_value_reads)


def aliases_in_order(graph: Graph, order: Sequence[int]) -> dict[int, int]:
    """Updated output -> state input, for the in-place updates that running `order` allows."""
    position = {op: k for k, op in enumerate(order)}
    return {
        new: state
        for new, state in state_updates(graph).in_place.items()
        if takes_over_storage((position[r] for r in graph.tensors[state].consumers),
                              position[graph.tensors[new].known_producer])
    }


def _analyze(graph: Graph) -> StateUpdates:
    new_value_of = {t.id: t.updated_by for t in graph.tensors if t.updated_by is not None}
    persistent = frozenset(new_value_of)
    descendants = _descendant_sets(graph)
    in_place: dict[int, int] = {}
    edges: dict[int, list[int]] = {}
    for state_id, new_id in sorted(new_value_of.items()):
        state = graph.tensors[state_id]
        new = graph.tensors[new_id]
        updater = new.producer
        if (
            updater is None
            or graph.ops[updater].op_type not in ELEMENTWISE_OPS
            or new.shape != state.shape
            or new.elem_type != state.elem_type
        ):
            continue
        readers = [r for r in state.consumers if r != updater]
        if any(descendants[updater] >> r & 1 for r in readers):
            continue  # a reader depends on the update: the old value must outlive it
        in_place[new.id] = state_id
        for r in readers:
            edges.setdefault(r, []).append(updater)
    return StateUpdates(persistent=persistent, in_place=in_place, edges=edges)


def _descendant_sets(graph: Graph) -> list[int]:
    """Bitset of the ops downstream of each op (ops are in topological order)."""
    descendants = [0] * len(graph.ops)
    for op in reversed(graph.ops):
        for t in op.output_ids:
            for c in graph.tensors[t].consumers:
                descendants[op.id] |= descendants[c] | (1 << c)
    return descendants
