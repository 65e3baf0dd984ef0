"""Ordering benchmark: peak live bytes of the optimized order vs the file order (ONNX Runtime's),
and how long ordering takes.

    .venv/bin/python -m bench.order.run_order_bench [--time-limit 20] [--fixtures NAME ...]
                                                   [--no-scale]

Writes bench/order/results.json and bench/order/results.md. For every fixture, and for the
5,263-op scale case (bench.order.scale_graph, exported on first use; needs the export extra):
the peak of the file order, of each quick order, of the OLLA whole-graph model (where it runs)
and of the windowed exact refinement, the proven lower bound, the method that won, its status
and gap; and three wall times: the quick orders with their peaks and the bound, ordering when
the keep-everything plan already fits the budget (`enough_bytes` at the best quick peak, what
`arenaplan plan` does with a generous budget), and the whole search under the time limit. All
peaks use the shared memory model of planner.memory.liveness.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

from bench.order.scale_graph import NAME as SCALE_NAME
from bench.order.scale_graph import scale_graph_path
from planner.ir.graph import Graph, load_graph
from planner.order import optimize_order
from planner.order.heuristics import QUICK_ORDERS
from tests.support.fixture_zoo import fixture_names, model_path

OUT = Path(__file__).resolve().parent
COLUMNS = {**{name: name.replace("_", "-") for name in QUICK_ORDERS},
           "olla": "OLLA model", "olla_windows": "OLLA windows"}


def kib(n: int | None) -> str:
    return "-" if n is None else f"{n / 1024:,.0f}"


def measure(name: str, graph: Graph, time_limit: float) -> dict:
    quick = optimize_order(graph, use_solver=False)
    started = time.perf_counter()
    optimize_order(graph, time_limit=time_limit, enough_bytes=quick.peak_bytes)
    fits_seconds = time.perf_counter() - started
    result = optimize_order(graph, time_limit=time_limit)
    return {
        "fixture": name, "ops": len(graph.ops), "file_peak": result.file_order_peak_bytes,
        "quick_peak": quick.peak_bytes, "candidates": result.candidates, "best": result.method,
        "peak": result.peak_bytes, "lower_bound": result.lower_bound_bytes,
        "status": result.status, "gap": result.gap, "stopped": result.stopped,
        "quick_seconds": quick.quick_seconds, "fits_seconds": fits_seconds,
        "seconds": result.seconds, "solver": result.solver, "notes": list(result.notes),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-limit", type=float, default=20.0)
    parser.add_argument("--fixtures", nargs="*", default=fixture_names())
    parser.add_argument("--no-scale", action="store_true",
                        help=f"skip the {SCALE_NAME} scale case")
    args = parser.parse_args()
    cases = [(name, model_path(name)) for name in args.fixtures]
    if not args.no_scale:
        cases.append((SCALE_NAME, scale_graph_path()))
    rows = []
    for name, path in cases:
        row = measure(name, load_graph(path), args.time_limit)
        rows.append(row)
        print(f"{name}: {row['best']} {row['peak']} B vs file {row['file_peak']} B; quick "
              f"{row['quick_seconds']:.2f} s, fits {row['fits_seconds']:.2f} s, search "
              f"{row['seconds']:.1f} s", flush=True)
    machine = f"{platform.processor() or platform.machine()}, {platform.system()}"
    (OUT / "results.json").write_text(json.dumps(
        {"time_limit_s": args.time_limit, "machine": machine, "rows": rows}, indent=1))
    (OUT / "results.md").write_text(table(rows, args.time_limit, machine))
    print(table(rows, args.time_limit, machine))
    return 0


def table(rows: list[dict], time_limit: float, machine: str) -> str:
    lines = [
        f"Peak live bytes (KiB) per order; time limit {time_limit:g} s, {machine}. Wall times: "
        "'quick s' the quick orders with their peaks and the lower bound; 'fits s' ordering "
        "when the keep-everything plan fits (stops after the quick orders); 'search s' the "
        "whole search under the time limit.",
        "",
        "| fixture | ops | file order | " + " | ".join(COLUMNS[c] for c in COLUMNS if c != "file")
        + " | best | quick vs file | best vs file | lower bound | status | gap | quick s "
        "| fits s | search s |",
        "|---|" + "---:|" * (len(COLUMNS) + 1) + "---|---:|---:|---:|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        c = r["candidates"]
        lines.append(
            f"| {r['fixture']} | {r['ops']} | {kib(r['file_peak'])} | "
            + " | ".join(kib(c.get(name)) for name in COLUMNS if name != "file")
            + f" | {r['best']} | {r['quick_peak'] / r['file_peak'] - 1:+.1%} "
            f"| {r['peak'] / r['file_peak'] - 1:+.1%} | {kib(r['lower_bound'])} | "
            f"{r['status']} | {r['gap']:.1%} | {r['quick_seconds']:.2f} | "
            f"{r['fits_seconds']:.2f} | {r['seconds']:.1f} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
