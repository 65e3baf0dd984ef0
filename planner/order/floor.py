"""The keep-everything floor: live bytes that no order avoids without recomputing anything.

    keep_everything_floor(graph, order, live_bytes, deadline=...) -> Floor

A lower bound on the peak of every order of the graph as it is (ordering's bound, tighter than
the op-footprint bound of planner.memory.liveness, which also holds for plans that recompute
values: this one does not). When op X runs, the ops before it form a set S that holds every
ancestor of X and no descendant; the values live at X are X's inputs and outputs and those made
in S and read after X. The least such bytes over every admissible S is a minimum cut (one
max-flow per X, OR-Tools): an op in S pulls its producers into S (infinite arcs), a successor
of X is outside S, and a value costs its bytes when its maker is in S and one of its readers is
not. Storage is counted as planner.memory.sharing counts it:

- a view adds nothing to its source (values are grouped by view root); two values live at once
  never share bytes in place (writing over a value needs it dead), except that X's own output
  may go over an input of X that no descendant of X reads;
- constants and state are live throughout, and so are the values of a state's in-place update
  chain, which sit in the state's bytes (not counted twice);
- a data input is made before step 0, a graph output is read at the end.

The floor is the largest cut over the ops examined plus constants and state, and never less
than the op-footprint bound. Any set of ops examined gives a valid floor; to find the largest
cheaply, ops are examined by the fewest bytes they hold in the orders measured so far (an
order's bytes at X are at least X's cut), fullest first, and the search stops once the next
op's bytes cannot beat the largest cut found: then the floor is the largest cut over every op
(`exact`). Each op's cut is the best case for that op alone, so the best order may still peak
above the floor. With the quick orders' bytes, a handful of max-flows on the bench models
(GPT-2-small, 4,500 ops: about 0.1 s).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from ortools.graph.python import max_flow  # type: ignore[import-untyped]  # ships no stubs

from planner.ir.graph import Graph
from planner.memory.liveness import lifetimes, order_lower_bound
from planner.memory.sharing import state_updates
from planner.memory.zones import persistent_tensors

INFINITE = 1 << 60


@dataclass(frozen=True)
class Floor:
    bytes: int  # max(persistent + the largest cut, the op-footprint bound)
    persistent: int
    op: int  # the op whose cut is largest (-1: no op was examined)
    live: dict[int, int]  # view root -> bytes, live at `op` in the best case for it
    cuts: int  # max-flows solved
    exact: bool  # the largest cut over every op (the search was not cut short)


def keep_everything_floor(graph: Graph, upper: Sequence[int] | None = None, *,
                          deadline: float | None = None) -> Floor:
    """The floor of `graph` (module doc). `upper[x]`: bytes op x holds in some order (see
    `fewest_live_bytes`; default: the file order's), which rank the ops examined; past
    `deadline` (time.perf_counter()) no further op is examined."""
    if upper is None:
        order = range(len(graph.ops))
        upper = fewest_live_bytes(graph, [(order, lifetimes(graph, order).live_bytes)])
    cuts = _Cuts(graph)
    base = cuts.persistent
    best: tuple[int, int, dict[int, int]] = (-1, -1, {})
    solved, exact = 0, True
    for x in sorted(range(len(graph.ops)), key=lambda op: -upper[op]):
        if upper[x] - base <= best[0]:
            break  # no op left can have a larger cut
        if solved and deadline is not None and time.perf_counter() > deadline:
            exact = False
            break
        cut, live = cuts.at(x)
        solved += 1
        if cut > best[0]:
            best = (cut, x, live)
    cut, op, live = best
    return Floor(bytes=max(base + max(cut, 0), order_lower_bound(graph)), persistent=base,
                 op=op, live=live, cuts=solved, exact=exact)


def fewest_live_bytes(graph: Graph, curves: Iterable[tuple[Sequence[int], Sequence[int]]]
                      ) -> list[int]:
    """Per op, the fewest live bytes at its step over (order, live bytes per step) pairs: an
    upper bound on its cut. The least over several orders leaves few ops to examine (ResNet-18
    with momentum: 2 max-flows instead of 1,196 with the best quick order's alone)."""
    fewest = [INFINITE] * len(graph.ops)
    for order, live in curves:
        for op, held in zip(order, live, strict=True):
            fewest[op] = min(fewest[op], held)
    return fewest


class _Cuts:
    """The min-cut network of a graph, built once: the arcs every op's cut shares, to which
    `at(x)` adds x's own."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        tensors = graph.tensors
        self.sharing = sharing = state_updates(graph)
        persistent = persistent_tensors(graph)
        # Every storage takes at least a byte, as in the memory model (the arena gives every
        # buffer an address).
        self.persistent = sum(max(tensors[t].nbytes, 1) for t in persistent)
        in_state = persistent | sharing.in_state
        n = len(graph.ops)
        self.n = n
        self.source, self.sink = n, n + 1
        self.successors: list[set[int]] = [set() for _ in graph.ops]
        tails: list[int] = []
        heads: list[int] = []
        for op in graph.ops:  # an op before x pulls its producers before x
            for p in {p for t in op.input_ids if (p := tensors[t].producer) is not None}:
                self.successors[p].add(op.id)
                tails.append(op.id)
                heads.append(p)
        # One auxiliary node per transient storage (view root): maker -> aux costs its bytes,
        # aux -> each reader (and the sink for a graph output) is infinite.
        readers: dict[int, set[int]] = {}
        self.kept: set[int] = set()
        for t in tensors:
            root = sharing.view_root(t.id)
            if root in in_state or t.id in in_state:
                continue  # a view of a constant or a state is in its persistent bytes
            readers.setdefault(root, set()).update(t.consumers)
            if t.is_graph_output:
                self.kept.add(root)
        self.roots = list(readers)
        self.readers = readers
        self.aux = {root: n + 2 + i for i, root in enumerate(self.roots)}
        for root in self.roots:
            aux = self.aux[root]
            for c in readers[root]:
                tails.append(aux)
                heads.append(c)
            if root in self.kept:
                tails.append(aux)
                heads.append(self.sink)
        caps = [INFINITE] * len(tails)
        self.cost_arc = {root: len(tails) + i for i, root in enumerate(self.roots)}
        self.maker = {root: tensors[root].producer for root in self.roots}
        self.size = {root: max(tensors[root].nbytes, 1) for root in self.roots}
        for root in self.roots:
            maker = self.maker[root]
            tails.append(self.source if maker is None else maker)
            heads.append(self.aux[root])
            caps.append(self.size[root])
        self.tails = np.array(tails, dtype=np.int64)
        self.heads = np.array(heads, dtype=np.int64)
        self.caps = np.array(caps, dtype=np.int64)

    def at(self, x: int) -> tuple[int, dict[int, int]]:
        """The fewest transient bytes live when op `x` runs, over every set of ops run before
        it, and the storages live in that best case (root -> bytes)."""
        own = self._own_bytes(x)
        touched = {self.sharing.view_root(t) for t in (*self.graph.ops[x].input_ids,
                                                        *self.graph.ops[x].output_ids)}
        caps = self.caps.copy()
        for root in touched & self.cost_arc.keys():
            caps[self.cost_arc[root]] = 0  # live when x runs: counted in `own`
        after = sorted(self.successors[x])
        extra_tails = np.array([self.source, *after], dtype=np.int64)
        extra_heads = np.array([x, *[self.sink] * len(after)], dtype=np.int64)
        flow = max_flow.SimpleMaxFlow()
        flow.add_arcs_with_capacity(np.concatenate([self.tails, extra_tails]),
                                    np.concatenate([self.heads, extra_heads]),
                                    np.concatenate([caps, np.full(len(extra_tails), INFINITE)]))
        if flow.solve(self.source, self.sink) != flow.OPTIMAL:
            raise RuntimeError(f"max flow at op {x} did not solve")
        before = np.zeros(self.n + 2 + len(self.roots), dtype=bool)
        before[flow.get_source_side_min_cut()] = True
        live = {root: self.size[root] for root, k in self.cost_arc.items()
                if caps[k] and before[self.tails[k]] and not before[self.heads[k]]}
        live.update(own)
        return int(flow.optimal_flow()) + sum(own.values()), live

    def _own_bytes(self, x: int) -> dict[int, int]:
        """The storages op `x` reads or writes (live when it runs), its outputs that may go over
        an input no descendant of x reads left out."""
        sharing = self.sharing
        op = self.graph.ops[x]
        roots = {sharing.view_root(t) for t in (*op.input_ids, *op.output_ids)}
        own = {r: self.size[r] for r in roots if r in self.size}
        later = self._descendants(x)
        for out in op.output_ids:
            for i in sharing.candidates.get(out, ()):
                r = sharing.view_root(i)
                if (r in own and self.maker[r] is not None and r not in self.kept
                        and not self.readers[r] & later):
                    own.pop(out, None)
                    break
        return own

    def _descendants(self, x: int) -> set[int]:
        seen: set[int] = set()
        stack = [x]
        while stack:
            for w in self.successors[stack.pop()]:
                if w not in seen:
                    seen.add(w)
                    stack.append(w)
        return seen
