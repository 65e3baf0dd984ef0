"""Rematerialization bench: budgets vs predicted overhead for our solver and every baseline.

For each fixture: a CPU profile (ONNX Runtime, quick policy), the planner's order, the
keep-everything schedule's peak (100%) and time; then at 100%, 75%, 50% of that peak and at the
smallest budget our solver reaches: our planner end to end (plan_graph: order, remat, layout with
its fragmentation retries, validator) and every baseline's schedule, replayed and (when it fits)
built into a plan the validator checks. Overhead = predicted time / keep-everything time. Peaks
and budgets count every buffer rounded up to the arena's 64-byte alignment.

    .venv/bin/python -m bench.remat.run_remat_bench [--fixtures a,b] [--time-limit S] [--workers N]

Besides the fixture zoo it benches `resnet18_w16_b32` (bench/scale_models.py: the ResNet-18
topology at batch 32), the issue's ">= 1,500 ops at 50% within 120 s" case: our planner gets
SCALE_TIME_LIMIT seconds end to end there, and the table shows the wall time it took.

writes bench/remat/results.json and results.md.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

from bench.scale_models import SCALE_MODELS, scale_model_path
from planner.errors import InfeasibleError
from planner.ir.graph import load_graph
from planner.memory.liveness import order_lower_bound
from planner.order import optimize_order
from planner.pipeline import plan_graph
from planner.plan.builder import build_plan
from planner.plan.validate import validate_plan
from planner.profile import QUICK_POLICY, profile_graph
from planner.profile.costs import costs_from_profile
from planner.remat import baselines
from planner.remat.configure import configure
from planner.remat.smallest import least_peak
from schemas.plan import PlanRequest
from tests.support.fixture_zoo import REQUIRED, model_path

HERE = Path(__file__).parent
SHARES = (1.0, 0.75, 0.5)
# Our planner's whole request (order, remat, layout, validation) on a scale model: 120 s with
# room for loading the graph and the profile cache.
SCALE_TIME_LIMIT = 105.0
BENCHED = (*REQUIRED, *SCALE_MODELS)
# The bisection for the smallest budget (planner.remat.smallest): six probes of up to 20 s.
SMALLEST_S = 120.0


def validated(graph, profile, schedule, budget) -> bool:
    request = PlanRequest(budgets={"cpu": budget}, profile=profile, time_limit_s=10)
    plan = build_plan(graph, schedule, request, plan_id="bench", planner_version="bench",
                      solvers=[], layout_time_limit=10).plan
    report = validate_plan(graph, plan, profile)
    return report.ok and plan.devices[0].arena_bytes <= budget


def run_budget(graph, profile, costs, order, budget, keep_seconds, time_limit, workers):
    """One budget: our planner end to end (plan_graph: order, remat, layout with its retries,
    validator), then every baseline on the same order."""
    row = {"budget_bytes": budget}
    started = time.perf_counter()
    request = PlanRequest(budgets={"cpu": budget}, profile=profile, time_limit_s=time_limit,
                          workers=workers)
    try:
        plan = plan_graph(graph, request)
    except InfeasibleError as exc:
        row["ours"] = {
            "status": "INFEASIBLE" if exc.is_lower_bound else "UNKNOWN", "overhead": None,
            "seconds": round(time.perf_counter() - started, 2),
            "smallest_feasible": exc.smallest_feasible, "lower_bound": exc.is_lower_bound,
        }
    else:
        remat = next((s for s in plan.solvers if s.phase == "remat"), None)
        row["ours"] = {
            "status": remat.status if remat else "OPTIMAL",
            "method": remat.method if remat else "keep-all",
            "seconds": round(time.perf_counter() - started, 2),
            "remat_seconds": round(remat.seconds, 2) if remat else 0.0,
            "overhead": round(plan.predicted_seconds / keep_seconds, 4),
            "gap": round(remat.gap, 4) if remat and remat.gap is not None else 0.0,
            "notes": remat.notes[:2] if remat else [],
            "arena_bytes": plan.devices[0].arena_bytes,
            "validated": validate_plan(graph, plan, profile).ok,
        }
    configured = configure(graph, order, costs, {"cpu": budget})
    runs = {
        "keep-all": lambda: baselines.keep_all(graph, order, "cpu", costs),
        "chen-sqrt": lambda: baselines.chen_sqrt(configured.fine, costs),
        "greedy": lambda: baselines.greedy(configured.fine, {"cpu": budget}, costs),
        "checkmate-lp": lambda: baselines.checkmate_lp(configured.problem, {"cpu": budget},
                                                       costs, time_limit=time_limit),
        "chain-dp": lambda: baselines.chain_dp(graph, {"cpu": budget}, costs, 64),
    }
    for name, run in runs.items():
        result = run()
        fits = result.fits({"cpu": budget})
        row[name] = {
            "fits": fits, "seconds": round(result.seconds, 2), "note": result.note,
            "peak_bytes": result.stats.peaks["cpu"] if result.stats else None,
            "overhead": (round(result.stats.seconds / keep_seconds, 4)
                         if result.stats and fits else None),
        }
        if fits:
            row[name]["validated"] = validated(graph, profile, result.schedule, budget)
    return row


def bench_fixture(name, time_limit, workers):
    graph = load_graph(scale_model_path(name) if name in SCALE_MODELS else model_path(name))
    if name in SCALE_MODELS:
        time_limit = SCALE_TIME_LIMIT
    profile = profile_graph(graph, ["cpu"], policy=QUICK_POLICY)
    costs = costs_from_profile(profile, graph, ["cpu"])
    order = optimize_order(graph, time_limit=5, workers=workers)
    keep = baselines.keep_all(graph, order.order, "cpu", costs)
    peak = keep.stats.peaks["cpu"]  # keep-everything live bytes, each buffer 64-byte aligned
    keep_seconds = keep.stats.seconds
    rows = {}
    smallest = None
    for share in SHARES:
        budget = int(peak * share)
        row = run_budget(graph, profile, costs, order.order, budget, keep_seconds, time_limit,
                         workers)
        rows[f"{int(share * 100)}%"] = row
        found = row["ours"].get("smallest_feasible")
        if found and not row["ours"].get("lower_bound"):
            smallest = found if smallest is None else min(smallest, found)
    # The smallest budget: bisection between the lower bound and the smallest budget planned
    # so far, deciding with the search without a solver (as min-budget does); then the
    # full planner at the result, raised 2% at a time until its plan validates within it.
    for row in rows.values():
        if row["ours"]["overhead"] is not None:
            smallest = row["budget_bytes"] if smallest is None else min(smallest,
                                                                      row["budget_bytes"])
    if smallest is not None:
        smallest = least_peak(graph, order.order, "cpu", costs, order_lower_bound(graph),
                              smallest, memory_unit=64, time_limit=SMALLEST_S).budget
    if smallest is not None:
        budget = smallest
        for _ in range(4):
            row = run_budget(graph, profile, costs, order.order, budget, keep_seconds,
                             time_limit, workers)
            if row["ours"]["overhead"] is not None and row["ours"].get("validated"):
                break
            budget = max(int(budget * 1.02), row["ours"].get("smallest_feasible") or 0)
        rows["min"] = row
    return {
        "fixture": name, "ops": len(graph.ops), "keep_all_peak_bytes": peak,
        "keep_all_seconds": keep_seconds, "lower_bound_bytes": order.lower_bound_bytes,
        "budgets": rows,
    }


def markdown(results) -> str:
    methods = ["ours", "keep-all", "chen-sqrt", "greedy", "checkmate-lp", "chain-dp"]
    lines = [
        "# Rematerialization bench", "",
        f"Machine: {results['machine']}; {results['workers']} CP-SAT workers, time limit "
        f"{results['time_limit_s']} s per solve (scale models: {SCALE_TIME_LIMIT:g} s for our "
        "whole request, whose wall seconds the table gives). Overhead = predicted step time / "
        "keep-everything time (CPU profile, ONNX Runtime, quick policy); `-` = no schedule "
        "within the budget; `n/a` = not applicable. `ours` also gives its status, the gap to "
        "a lower bound valid for every plan (each op once on its fastest device) and the "
        "solve seconds; every plan counted here was built and passed the validator.", "",
        "| fixture | ops | budget | bytes | " + " | ".join(methods) + " |",
        "|---|---|---|---|" + "---|" * len(methods),
    ]
    for fx in results["fixtures"]:
        for label, row in fx["budgets"].items():
            share = row["budget_bytes"] / fx["keep_all_peak_bytes"]
            cells = []
            for method in methods:
                entry = row[method]
                if method == "ours":
                    if entry["overhead"] is None:
                        cells.append(f"- ({entry['status']}, {entry['seconds']} s)")
                    else:
                        ok = "" if entry.get("validated") else " NOT VALIDATED"
                        cells.append(f"{entry['overhead']:.3f} ({entry['status']}, gap "
                                     f"{entry['gap']:.1%}, {entry['seconds']} s){ok}")
                elif entry["overhead"] is not None and not entry.get("validated"):
                    cells.append(f"{entry['overhead']:.3f} (layout over budget)")
                elif entry["note"] == "not a chain":
                    cells.append("n/a")
                elif entry["overhead"] is None:
                    cells.append("-")
                else:
                    cells.append(f"{entry['overhead']:.3f}")
            lines.append(f"| {fx['fixture']} | {fx['ops']} | {label} ({share:.0%}) | "
                         f"{row['budget_bytes']} | " + " | ".join(cells) + " |")
    bounds = [f"{fx['fixture']} {fx['lower_bound_bytes']} "
              f"({fx['lower_bound_bytes'] / fx['keep_all_peak_bytes']:.0%})"
              for fx in results["fixtures"]]
    lines += ["", "Lower bounds (bytes, no plan below): " + ", ".join(bounds)]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fixtures", default=",".join(BENCHED))
    parser.add_argument("--time-limit", type=float, default=60.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--merge", action="store_true",
                        help="replace only these fixtures in an existing results.json")
    args = parser.parse_args()
    results = {
        "machine": f"{platform.processor() or platform.machine()}, {platform.platform()}",
        "workers": args.workers, "time_limit_s": args.time_limit, "fixtures": [],
    }
    if args.merge and (HERE / "results.json").exists():
        results["fixtures"] = json.loads((HERE / "results.json").read_text())["fixtures"]
    for name in args.fixtures.split(","):
        print(f"bench {name}", flush=True)
        entry = bench_fixture(name, args.time_limit, args.workers)
        kept = [f for f in results["fixtures"] if f["fixture"] != name]
        order = [*BENCHED, *(f["fixture"] for f in kept if f["fixture"] not in BENCHED)]
        results["fixtures"] = sorted([*kept, entry], key=lambda f: order.index(f["fixture"])
                                     if f["fixture"] in order else len(order))
        (HERE / "results.json").write_text(json.dumps(results, indent=1))
        (HERE / "results.md").write_text(markdown(results))
    print(markdown(results))


if __name__ == "__main__":
    main()
