"""Why a model's keep-everything arena is where it is: the floor and what is live there.

    .venv/bin/python -m bench.memory.floor MODEL.onnx [--optimization disable|extended]
        [--top 12] [--json]

The keep-everything floor (planner.order.floor: the live bytes that no order avoids without
recomputing values, ordering's lower bound) against PyTorch eager's peak (issue 13). A
keep-everything arena above a target the floor also exceeds can only come down by recomputing
values or by a graph that keeps fewer (ONNX Runtime's extended rewrite folds transposes into
its fused matrix products). The breakdown names what is live at the floor's op in the best case
for it and, for comparison, at the peak of the best quick order (planner.order.optimize with
the solver off, as a keep-everything plan orders).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter

from planner.ir.graph import Graph, load_graph
from planner.memory.liveness import lifetimes
from planner.memory.zones import persistent_tensors
from planner.order import optimize_order
from planner.order.floor import fewest_live_bytes, keep_everything_floor
from planner.order.heuristics import QUICK_ORDERS
from schemas.units import format_bytes


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
    started = time.perf_counter()
    orders = [order, *(made for make in QUICK_ORDERS.values() if (made := make(graph)))]
    upper = fewest_live_bytes(graph, ((o, lifetimes(graph, o).live_bytes) for o in orders))
    floor = keep_everything_floor(graph, upper)  # exact: no deadline
    seconds = time.perf_counter() - started
    peak, peak_op, live = quick_peak(graph, order)
    if args.json:
        print(json.dumps({"floor": floor.bytes, "persistent": floor.persistent,
                          "floor_op": graph.ops[floor.op].name, "quick_peak": peak,
                          "cuts": floor.cuts, "seconds": seconds}))
        return 0
    print(f"{graph.name} ({args.optimization}, {len(graph.ops)} ops): persistent "
          f"{format_bytes(floor.persistent)}; floor {format_bytes(floor.bytes)} ({seconds:.2f} s, "
          f"{floor.cuts} max-flows) at "
          f"{graph.ops[floor.op].name} ({graph.ops[floor.op].op_type}), live there at least:")
    print("\n".join(describe(graph, floor.live, args.top)))
    print(f"best quick order's peak {format_bytes(peak)} at {graph.ops[peak_op].name} "
          f"({graph.ops[peak_op].op_type}), live there besides constants and state:")
    print("\n".join(describe(graph, live, args.top)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
