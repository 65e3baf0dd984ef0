"""One model through one planner tree: what the memory bench asks of the planner, as JSON.

    PYTHONPATH=TREE python bench/memory/plan_worker.py plan MODEL.onnx [--time-limit S]
        [--optimization extended]
    PYTHONPATH=TREE python bench/memory/plan_worker.py min-budget MODEL.onnx [--time-limit S]

Run as a script in a fresh process whose import path starts with TREE, so that the same code
measures the current tree and a checkout of an older commit (it uses only the planner API both
have: load_graph, liveness, plan_graph, min_budget). Prints one JSON line. `plan`: the
file-order peak and the op-footprint bound of planner.memory.liveness and the keep-everything
plan (one cpu budget large enough for everything) with its arena, persistent bytes, the
order phase's bound and gap, and per-phase solver seconds. `min-budget`:
planner.queries.min_budget under the time limit (apart, because it can take long: the caller
gives it a timeout of its own). `--optimization` plans ONNX
Runtime's rewrite of the model (what `arenaplan plan` plans by default; trees from before that
option only plan the model as sent).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from planner.ir.graph import load_graph
from planner.memory.liveness import lifetimes, order_lower_bound
from planner.pipeline import plan_graph
from planner.queries import min_budget
from schemas.plan import PlanRequest

EVERYTHING = 1 << 50


def keep_everything(graph, time_limit: float) -> dict:
    row: dict = {"ops": len(graph.ops), "time_limit_s": time_limit}
    started = time.perf_counter()
    row["file_order_peak"] = lifetimes(graph, range(len(graph.ops))).peak
    row["liveness_seconds"] = time.perf_counter() - started
    row["op_footprint_bound"] = order_lower_bound(graph)
    started = time.perf_counter()
    request = PlanRequest(budgets={"cpu": EVERYTHING}, time_limit_s=time_limit)
    if getattr(graph, "optimized", None) is not None:  # the same request the CLI would make
        request = request.model_copy(update={"graph_optimization": graph.optimized.level})
    plan = plan_graph(graph, request)
    row["plan_seconds"] = time.perf_counter() - started
    device = plan.devices[0]
    row["arena_bytes"] = device.arena_bytes
    row["live_bytes_bound"] = device.lower_bound_bytes
    row["persistent_bytes"] = device.persistent_bytes
    row["phases"] = [{"phase": s.phase, "method": s.method, "status": s.status,
                      "bound": s.bound, "gap": s.gap, "seconds": s.seconds}
                     for s in plan.solvers]
    row["order_seconds"] = sum(s.seconds for s in plan.solvers if s.phase == "order")
    order = next((s for s in plan.solvers if s.phase == "order"), None)
    row["order_bound"], row["order_gap"] = (None, None) if order is None else (order.bound,
                                                                             order.gap)
    return row


def smallest_budget(graph, time_limit: float) -> dict:
    result = min_budget(graph, "cpu", time_limit=time_limit)
    return {"time_limit_s": time_limit, "lower_bound": result.lower_bound,
            "achieved": result.achieved, "keep_all_arena": result.keep_all_arena,
            "seconds": result.seconds}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("plan", "min-budget"))
    parser.add_argument("model")
    parser.add_argument("--time-limit", type=float, default=30.0)
    parser.add_argument("--optimization", choices=("disable", "basic", "extended"),
                        default="disable")
    args = parser.parse_args()
    graph = (load_graph(args.model) if args.optimization == "disable"
             else load_graph(args.model, optimization=args.optimization))
    work = keep_everything if args.what == "plan" else smallest_budget
    print(json.dumps(work(graph, args.time_limit)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
