"""The keep-everything floor: live bytes that no order avoids without recomputing anything.

    .venv/bin/python -m bench.memory.floor MODEL.onnx [--optimization disable|extended]
        [--top 12] [--json]

Why a model's keep-everything arena is where it is, against PyTorch eager's peak (issue 13).
When op X runs, the ops before it form a set S that holds every ancestor of X and no descendant;
the values live at X are X's inputs and outputs and those made in S and read after X. The least
such bytes over every admissible S is a minimum cut (one max-flow per X, OR-Tools): an op in S
pulls its producers into S (infinite arcs), and a value costs its bytes when its maker is in S
and one of its readers is not. Storage is counted as planner.memory.sharing counts it:

- a view adds nothing to its source (values are grouped by view root); two values live at once
  never share bytes in place (writing over a value needs it dead), except that X's own output
  may go over an input of X that nothing after X reads;
- constants and state are live throughout, and so are the values of a state's in-place update
  chain, which sit in the state's bytes (not counted twice);
- a data input is made before step 0, a graph output is read at the end.

The floor is the largest cut over the ops examined (the CANDIDATES ops with the most bytes that
every order holds at them, and the best quick order's CANDIDATES fullest steps; any subset gives
a valid floor) plus constants and state, and never less than the op-footprint bound
(planner.memory.liveness: it also holds every data input at step 0 and every graph output at
the last step). Each op's cut is the best case for that op alone, so the best order may still
peak above the floor. No order goes below it, so a keep-everything arena
above a target the floor also exceeds can only come down by recomputing values or by a graph
that keeps fewer (ONNX Runtime's extended rewrite folds transposes into its fused matrix
products). The breakdown names what is live at the floor's op and, for comparison, at the peak of
the best quick order (planner.order.optimize with the solver off, as a keep-everything plan
orders).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from dataclasses import dataclass

import numpy as np
from ortools.graph.python import max_flow

from planner.ir.graph import Graph, load_graph
from planner.memory.liveness import lifetimes, order_lower_bound
from planner.memory.sharing import state_updates
from planner.memory.zones import persistent_tensors
from planner.order import optimize_order
from schemas.units import format_bytes

CANDIDATES = 48
INFINITE = 1 << 60


@dataclass(frozen=True)
class Floor:
    bytes: int  # persistent + the largest cut
    persistent: int
    op: int  # the op whose cut is largest
    live: dict[int, int]  # view root -> bytes, live at `op` in the best order for it


@dataclass(frozen=True)
class _Values:
    """The transient storages of a graph (view roots) with their makers and readers."""

    size: dict[int, int]  # root -> bytes
    maker: dict[int, int | None]  # root -> producing op (None: a data input)
    readers: dict[int, set[int]]  # root -> ops reading it or one of its views
    kept: set[int]  # roots holding a graph output (read at the end)


def keep_everything_floor(graph: Graph, quick_order: list[int] | None = None) -> Floor:
    """The floor of `graph` (see the module doc); `quick_order` adds its fullest steps to the
    ops examined."""
    n = len(graph.ops)
    values = _transient_values(graph)
    ancestors = _ancestors(graph)
    base = sum(graph.tensors[t].nbytes for t in persistent_tensors(graph))
    examined = set(np.argsort(-_crossing(values, ancestors))[:CANDIDATES].tolist())
    if quick_order is not None:
        live = lifetimes(graph, quick_order).live_bytes
        steps = sorted(range(n), key=lambda k: -live[k])[:CANDIDATES]
        examined |= {quick_order[k] for k in steps}
    best: tuple[int, int, dict[int, int]] = (-1, 0, {})
    for op in sorted(examined):
        cut, live_at = _min_cut(graph, values, ancestors, op)
        best = max(best, (cut, op, live_at), key=lambda b: b[0])
    cut, op, live_at = best
    return Floor(bytes=max(base + max(cut, 0), order_lower_bound(graph)), persistent=base, op=op,
                 live=live_at)


def _transient_values(graph: Graph) -> _Values:
    tensors = graph.tensors
    sharing = state_updates(graph)
    in_state = persistent_tensors(graph) | set(sharing.in_place) | {
        t for chain in sharing.update_chains.values() for t in chain}
    values = _Values({}, {}, {}, set())
    for t in tensors:
        if t.id in in_state:
            continue
        root = sharing.view_root(t.id)
        values.size[root] = tensors[root].nbytes
        values.maker[root] = tensors[root].producer
        values.readers.setdefault(root, set()).update(t.consumers)
        if t.is_graph_output:
            values.kept.add(root)
    return values


def _ancestors(graph: Graph) -> np.ndarray:
    """ancestors[x, a]: op a runs before op x in every order (op ids are topological)."""
    n = len(graph.ops)
    ancestors = np.zeros((n, n), dtype=bool)
    for op in graph.ops:
        for t in op.input_ids:
            p = graph.tensors[t].producer
            if p is not None:
                ancestors[op.id] |= ancestors[p]
                ancestors[op.id, p] = True
    return ancestors


def _crossing(values: _Values, ancestors: np.ndarray) -> np.ndarray:
    """Bytes live at each op in every order: made by it or an ancestor, read by it or a
    descendant (what ranks the ops examined)."""
    n = len(ancestors)
    up_to = ancestors | np.eye(n, dtype=bool)
    from_ = up_to.T
    crossing = np.zeros(n, dtype=np.int64)
    for root, size in values.size.items():
        maker = values.maker[root]
        read = np.ones(n, dtype=bool) if root in values.kept else np.zeros(n, dtype=bool)
        for c in values.readers[root]:
            read |= up_to[c]
        crossing += (read if maker is None else read & from_[maker]) * size
    return crossing


def _min_cut(graph: Graph, values: _Values, ancestors: np.ndarray, x: int
             ) -> tuple[int, dict[int, int]]:
    """The fewest transient bytes live when op `x` runs, over every set of ops run before it,
    and the storages live in that best case (root -> bytes)."""
    n = len(graph.ops)
    source, sink = n, n + 1
    tails: list[int] = []
    heads: list[int] = []
    caps: list[int] = []

    def arc(a: int, b: int, cap: int = INFINITE) -> None:
        tails.append(a)
        heads.append(b)
        caps.append(cap)

    for op in range(n):
        if op == x or ancestors[x, op]:
            arc(source, op)
        elif ancestors[op, x]:
            arc(op, sink)
    sharing = state_updates(graph)
    touched = {sharing.view_root(t) for t in (*graph.ops[x].input_ids, *graph.ops[x].output_ids)}
    own = _own_bytes(graph, values, ancestors, x)
    aux = n + 2
    cost_arcs: dict[int, int] = {}
    for root, size in values.size.items():
        if root in touched:
            continue  # live when x runs: counted in `own`
        maker = values.maker[root]
        for c in values.readers[root]:
            if maker is not None:
                arc(c, maker)  # a reader before x pulls the maker before x
            arc(aux, c)
        if root in values.kept:
            arc(aux, sink)
        cost_arcs[root] = len(tails)
        arc(source if maker is None else maker, aux, size)
        aux += 1
    flow = max_flow.SimpleMaxFlow()
    flow.add_arcs_with_capacity(np.array(tails), np.array(heads), np.array(caps))
    if flow.solve(source, sink) != flow.OPTIMAL:
        raise RuntimeError(f"max flow at op {x} did not solve")
    before = set(flow.get_source_side_min_cut())
    live = {root: values.size[root] for root, k in cost_arcs.items()
            if tails[k] in before and heads[k] not in before}
    live.update(own)
    return int(flow.optimal_flow()) + sum(own.values()), live


def _own_bytes(graph: Graph, values: _Values, ancestors: np.ndarray, x: int
               ) -> dict[int, int]:
    """The storages op `x` reads or writes (live when it runs), its outputs that may go over an
    input nothing after it reads left out."""
    sharing = state_updates(graph)
    op = graph.ops[x]
    roots = {sharing.view_root(t) for t in (*op.input_ids, *op.output_ids)}
    own = {r: values.size[r] for r in roots if r in values.size}
    for out in op.output_ids:
        for i in sharing.candidates.get(out, ()):
            r = sharing.view_root(i)
            if r in own and values.maker[r] is not None and r not in values.kept and not any(
                    ancestors[c, x] for c in values.readers[r]):
                own.pop(out, None)
                break
    return own


def describe(graph: Graph, roots: dict[int, int], top: int) -> list[str]:
    """The largest storages among `roots` (root -> bytes) and their sum by role and maker."""
    tensors = graph.tensors

    def maker(t: int) -> str:
        p = tensors[t].producer
        return "input" if p is None else graph.ops[p].op_type

    lines = [f"  {format_bytes(b)}  {tensors[t].name} ({tensors[t].role.value}, {maker(t)})"
             for t, b in sorted(roots.items(), key=lambda kv: -kv[1])[:top]]
    by_kind: Counter[tuple[str, str]] = Counter()
    for t, b in roots.items():
        by_kind[(tensors[t].role.value, maker(t))] += b
    lines.append("  by role and maker: " + ", ".join(
        f"{role}/{op} {format_bytes(b)}" for (role, op), b in by_kind.most_common(8)))
    return lines


def quick_peak(graph: Graph, order: list[int]) -> tuple[int, int, dict[int, int]]:
    """An order's peak, the op at it and the storages live there (root -> bytes)."""
    life = lifetimes(graph, order)
    step = max(range(len(order)), key=life.live_bytes.__getitem__)
    persistent = persistent_tensors(graph)
    live = {life.alias.get(t, t) for t, first in life.first.items()
            if first <= step <= life.last[t]} - persistent
    return life.peak, order[step], {t: graph.tensors[t].nbytes for t in live}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--optimization", choices=("disable", "basic", "extended"),
                        default="disable")
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--json", action="store_true", help="one JSON line: floor and peak")
    args = parser.parse_args()
    graph = load_graph(args.model, optimization=args.optimization)
    order = list(optimize_order(graph, use_solver=False).order)
    floor = keep_everything_floor(graph, order)
    peak, peak_op, live = quick_peak(graph, order)
    if args.json:
        print(json.dumps({"floor": floor.bytes, "persistent": floor.persistent,
                          "floor_op": graph.ops[floor.op].name, "quick_peak": peak}))
        return 0
    print(f"{graph.name} ({args.optimization}, {len(graph.ops)} ops): persistent "
          f"{format_bytes(floor.persistent)}; floor {format_bytes(floor.bytes)} at "
          f"{graph.ops[floor.op].name} ({graph.ops[floor.op].op_type}), live there at least:")
    print("\n".join(describe(graph, floor.live, args.top)))
    print(f"best quick order's peak {format_bytes(peak)} at {graph.ops[peak_op].name} "
          f"({graph.ops[peak_op].op_type}), live there besides constants and state:")
    print("\n".join(describe(graph, live, args.top)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
