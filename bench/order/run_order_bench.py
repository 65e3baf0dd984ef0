"""Ordering benchmark: peak live bytes of the optimized order vs the file order (ONNX Runtime's).

    .venv/bin/python -m bench.order.run_order_bench [--time-limit 20] [--fixtures NAME ...]

Writes bench/order/results.json and bench/order/results.md. For every fixture: the peak of the
file order, of each heuristic, of the OLLA whole-graph model (where it runs) and of the windowed
exact refinement, the proven lower bound, the method that won, its status and gap, and seconds.
All peaks use the shared memory model of planner.memory.liveness (state persistent, in-place
updates).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

from planner.ir.graph import load_graph
from planner.order import optimize_order
from tests.support.fixture_zoo import fixture_names, model_path

OUT = Path(__file__).resolve().parent


def kib(n: int | None) -> str:
    return "-" if n is None else f"{n / 1024:,.0f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-limit", type=float, default=20.0)
    parser.add_argument("--fixtures", nargs="*", default=fixture_names())
    args = parser.parse_args()
    rows = []
    for name in args.fixtures:
        graph = load_graph(model_path(name))
        result = optimize_order(graph, time_limit=args.time_limit)
        rows.append({
            "fixture": name, "ops": len(graph.ops), "file_peak": result.file_order_peak_bytes,
            "candidates": result.candidates, "best": result.method,
            "peak": result.peak_bytes, "lower_bound": result.lower_bound_bytes,
            "status": result.status, "gap": result.gap, "seconds": result.seconds,
            "solver": result.solver, "notes": list(result.notes),
        })
        print(f"{name}: {result.method} {result.peak_bytes} B vs file "
              f"{result.file_order_peak_bytes} B ({result.seconds:.1f} s)", flush=True)
    machine = f"{platform.processor() or platform.machine()}, {platform.system()}"
    (OUT / "results.json").write_text(json.dumps(
        {"time_limit_s": args.time_limit, "machine": machine, "rows": rows}, indent=1))
    lines = [
        f"Peak live bytes (KiB) per order; time limit {args.time_limit:g} s, {machine}.",
        "",
        "| fixture | ops | file order | greedy | eager-free | OLLA model | OLLA windows | best "
        "| vs file | lower bound | status | gap | s |",
        "|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---|---:|---:|",
    ]
    for r in rows:
        c = r["candidates"]
        lines.append(
            f"| {r['fixture']} | {r['ops']} | {kib(r['file_peak'])} | {kib(c.get('greedy'))} | "
            f"{kib(c.get('eager_free'))} | {kib(c.get('olla'))} | {kib(c.get('olla_windows'))} "
            f"| {r['best']} | {r['peak'] / r['file_peak'] - 1:+.1%} | {kib(r['lower_bound'])} | "
            f"{r['status']} | {r['gap']:.1%} | {r['seconds']:.1f} |"
        )
    (OUT / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
