"""Which values may share storage: views, in-place ops and in-place state updates.

Every op output used to get bytes of its own. ONNX Runtime's allocation planner and PyTorch both
do better, and so do we (issue 13):

- **Views.** Reshape, Flatten, Squeeze, Unsqueeze and Identity write nothing: their output is
  their first input's bytes under another shape (ONNX Runtime's CPU and CUDA kernels skip the
  copy when output and input are the same address). A view always shares its source's storage,
  whatever the order; the storage lives until the last read of any of its views.
- **In place.** An op of `IN_PLACE_OPS` (planner.ir.aliasing has the per-op rules; elementwise:
  each output element depends only on the same element of each input; Softmax and LogSoftmax:
  each row read before it is written; a scatter: over its data input only, which its kernel
  otherwise copies into the output first;
  Gemm: over its addend C only, the same way, which makes a fused SGD update
  `W - lr * A @ B` (schemas.update_fusion) write the new weight over the old one)
  may write its output over an input with the same shape and dtype when
  nothing reads that storage afterwards and the value need not survive: not a constant, not a
  graph input other than state, not a graph output. Whether that holds depends on the schedule
  (which reads come later, what a recomputation still needs), so planner.memory.replay decides
  it per schedule; this module gives the static candidates.
- **State updates.** A state input (weights, momenta, Adam moments, running stats) may be
  written over only by its own update chain: the elementwise ops that lead from the old value to
  the new one, each output the next op's input (`v.mul_(mu).add_(g)`, `w.sub_(lr * g)`). When
  the whole chain runs in place the new value ends in the state's storage and needs no copy
  between steps. Every other reader of a chain value must run before the op that overwrites it:
  those are the "read before update" precedence edges the ordering solvers get (a pair is
  dropped when an edge would close a cycle).

State inputs are persistent: they exist before the step and, holding the new value, after it,
so they occupy their bytes for the whole step (CalcGraph's parameter / optimizer heap zones).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from planner.ir.aliasing import in_place_inputs, view_source_of
from planner.ir.graph import Graph, per_graph


@dataclass(frozen=True)
class Sharing:
    """The static storage facts of one graph (see the module doc)."""

    persistent: frozenset[int]  # state input tensor ids (updated_by is set)
    view_source: dict[int, int]  # view output -> the tensor whose bytes it reinterprets
    candidates: dict[int, tuple[int, ...]]  # output -> inputs it may be written over
    update_chains: dict[int, frozenset[int]]  # state -> the chain values that may overwrite it
    in_place: dict[int, int]  # updated output -> its state, where the whole chain may run in
    # place (whether it does depends on the order: planner.memory.replay)
    edges: dict[int, list[int]]  # reader op -> [chain op]: read the old value first
    # Every value of every update chain: each may sit in its state's storage, so a lower bound
    # must count none of them (a momentum chain's `mu * v` made early and held until the
    # gradient comes costs no bytes when written over `v`).
    in_state: frozenset[int]

    def view_root(self, tensor: int) -> int:
        """The tensor that owns the bytes a chain of views reads (itself when not a view)."""
        while tensor in self.view_source:
            tensor = self.view_source[tensor]
        return tensor


@per_graph
def state_updates(graph: Graph) -> Sharing:
    """The analysis of `graph` (computed once per graph: every phase asks for it)."""
    return _analyze(graph)


def takes_over_storage(old_value_reads: Iterable[int], written_at: int) -> bool:
    """The in-place rule in time: a value may be written over a storage only when every read of
    what the storage held comes at or before the step that writes it."""
    return all(read <= written_at for read in old_value_reads)


def _analyze(graph: Graph) -> Sharing:
    tensors = graph.tensors
    view_source: dict[int, int] = {}
    candidates: dict[int, tuple[int, ...]] = {}
    for op in graph.ops:
        source = view_source_of(graph, op)
        if source is not None:
            view_source[op.output_ids[0]] = source
        elif found := in_place_inputs(graph, op):
            candidates[op.output_ids[0]] = found
    persistent = frozenset(t.id for t in tensors if t.updated_by is not None)
    descendants: list[int] | None = None  # made when a state has an update path
    views_of: dict[int, list[int]] = {}
    for view, src in view_source.items():
        views_of.setdefault(src, []).append(view)
    chains: dict[int, frozenset[int]] = {}
    in_place: dict[int, int] = {}
    edges: dict[int, list[int]] = {}
    for state in sorted(persistent):
        new = tensors[state].updated_by
        assert new is not None
        path = _update_path(graph, candidates, state, new)
        if path is None:
            continue
        writers = [tensors[t].known_producer for t in path[1:]]
        pairs = [(r, w) for old, w in zip(path, writers, strict=False)
                 for r in _storage_readers(graph, views_of, old) if r != w]
        if descendants is None:
            descendants = _descendant_sets(graph)
        if any(descendants[w] >> r & 1 for r, w in pairs):
            continue  # a reader depends on the update: the old value must outlive it
        chains[state] = frozenset(path[1:])
        in_place[new] = state
        for r, w in pairs:
            edges.setdefault(r, []).append(w)
    return Sharing(persistent=persistent, view_source=view_source, candidates=candidates,
                   update_chains=chains, in_place=in_place, edges=edges,
                   in_state=frozenset().union(*chains.values()))


def _storage_readers(graph: Graph, views_of: dict[int, list[int]], tensor: int) -> set[int]:
    """The ops that read `tensor`'s bytes: its consumers and those of its views, transitively."""
    readers: set[int] = set()
    pending = [tensor]
    while pending:
        t = pending.pop()
        readers.update(graph.tensors[t].consumers)
        pending.extend(views_of.get(t, ()))
    return readers


def _update_path(graph: Graph, candidates: dict[int, tuple[int, ...]], state: int, new: int
                 ) -> list[int] | None:
    """The values from `state` to its update `new`, each written over the previous one by an
    in-place candidate (shortest such path), or None when there is none."""
    previous: dict[int, int] = {}
    frontier = [new]
    seen = {new}
    while frontier and state not in previous.values():
        nxt = []
        for value in frontier:
            for x in candidates.get(value, ()):
                if x in seen:
                    continue
                seen.add(x)
                previous[x] = value
                if x == state:
                    break
                nxt.append(x)
        frontier = nxt
    if state not in previous:
        return None
    path = [state]
    while path[-1] != new:
        path.append(previous[path[-1]])
    return path


def _descendant_sets(graph: Graph) -> list[int]:
    """Bitset of the ops downstream of each op (ops are in topological order)."""
    descendants = [0] * len(graph.ops)
    for op in reversed(graph.ops):
        for t in op.output_ids:
            for c in graph.tensors[t].consumers:
                descendants[op.id] |= descendants[c] | (1 << c)
    return descendants
