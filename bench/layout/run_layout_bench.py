"""Layout benchmark: heuristics (greedy) vs the full planner (heuristics, hot window, canonical
search, CP-SAT), and the layout seconds of real plans.

    .venv/bin/python -m bench.layout.run_layout_bench [--quick] [--time-limit 60] [--workers 1]
                                                     [--no-fixtures] [--no-plans]

Writes bench/layout/results.json and bench/layout/results.md. Instances:
- the buffers of every fixture graph's plan (planned with no budget pressure, order optimized;
  storage owners over their storages' ranges, persistent zone; alignment 64 as in plans);
- real traces: the keep-everything plans of bench-scale training steps at batch 16 to 128
  (bench.layout.traces, written there first; 1-byte alignment, the CSV convention), every trace
  found in bench/models/traces/;
- tight synthetic instances (100% packed by construction: the optimum equals the capacity and
  the live-bytes lower bound), 150 to 450 buffers, several seeds;
- training-step-like synthetic traces up to 5,000 buffers (with and without a persistent zone);
- rematerialization traces (bench/layout/remat_traces/: the storages of remat schedules that
  `plan_remat` chose for GPT-2-small at +50%, MobileNetV2 at +30% and +40% and UNet-Adam at
  +30% of their activations, alignment 64 as in plans), laid out with the time limit a plan's
  remat layout gets (planner.time_budget: 6 s in a 60 s request).
Then (unless --no-plans) `plan_graph` keep-everything on every bench-scale model of
bench/models/ (what the memory bench exports): the seconds its layout phase took.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.layout.generators import tight_instance, training_trace
from bench.layout.traces import available_traces
from bench.scale_models import MODELS
from planner.layout import (
    CSV_DEFAULT_ALIGNMENT,
    DEFAULT_ALIGNMENT,
    Buffer,
    check_layout,
    heuristic_layout,
    lower_bound,
    plan_layout,
    read_buffers_csv,
)
from planner.plan.live import storage_ranges

HERE = Path(__file__).resolve().parent
REMAT_TRACES = HERE / "remat_traces"
# the layout of a remat schedule in a 60 s request (planner.time_budget.remat_layout) and the
# issue's target for the layout of a bench-scale model's plan
REMAT_TIME_LIMIT = 6.0
PLAN_LAYOUT_TARGET_S = 2.0


@dataclass(frozen=True)
class BenchInstance:
    name: str
    kind: str
    buffers: list[Buffer]
    capacity: int | None = None  # known optimum (tight instances), else None
    alignment: int = DEFAULT_ALIGNMENT
    time_limit: float | None = None  # its own limit (remat traces), else the bench's


def bench_instances_from_buffers(
    name: str, buffers: Sequence[Buffer], *, kind: str = "external", capacity: int | None = None,
    alignment: int = DEFAULT_ALIGNMENT,
) -> BenchInstance:
    """Wrap any list of buffers (e.g. from a fixture graph's plan) as a benchmark instance."""
    return BenchInstance(name=name, kind=kind, buffers=list(buffers), capacity=capacity,
                         alignment=alignment)


def trace_instances() -> list[BenchInstance]:
    """The real traces written so far (bench.layout.traces), smallest first."""
    return [bench_instances_from_buffers(f"trace-{name}", buffers, kind="trace",
                                         alignment=CSV_DEFAULT_ALIGNMENT)
            for name, buffers in available_traces()]


def remat_instances() -> list[BenchInstance]:
    """The rematerialization traces, laid out as a plan's remat layout is."""
    return [BenchInstance(f"remat-{path.stem}", "remat", read_buffers_csv(path),
                          time_limit=REMAT_TIME_LIMIT)
            for path in sorted(REMAT_TRACES.glob("*.csv"))]


def fixture_instances(order_time_limit: float = 5.0) -> list[BenchInstance]:
    """The buffers of each fixture's plan: real training-step lifetimes, persistent zone too."""
    from planner.pipeline import plan_model
    from schemas.plan import PlanRequest
    from tests.support.fixture_zoo import fixture_names, model_path

    instances = []
    for name in fixture_names():
        plan = plan_model(model_path(name), PlanRequest(budgets={"cpu": 2**40},
                                                        time_limit_s=2 * order_time_limit))
        buffers = [  # one buffer per storage, over the union of its buffers' ranges
            Buffer(b.id, first, last + 1, max(b.size, 1),
                   zone="persistent" if b.zone == "persistent" else None)
            for b, first, last in storage_ranges(plan.buffers)
        ]
        instances.append(bench_instances_from_buffers(f"fixture-{name}", buffers,
                                                      kind="fixture"))
    return instances


def synthetic_instances(
    sizes: Sequence[int] = (150, 300, 450), seeds: Sequence[int] = (1, 2, 3, 4, 5)
) -> list[BenchInstance]:
    out = []
    for n in sizes:
        for seed in seeds:
            buffers, capacity = tight_instance(n, seed)
            out.append(BenchInstance(f"tight-{n}-s{seed}", "tight", buffers, capacity))
    return out


def training_instances(
    sizes: Sequence[int] = (500, 1000, 2000, 5000), seeds: Sequence[int] = (1, 4),
    zone_seeds: Sequence[int] = (1,),
) -> list[BenchInstance]:
    out = []
    for n in sizes:
        for seed in seeds:
            out.append(BenchInstance(f"train-{n}-s{seed}", "training", training_trace(n, seed)))
            if seed in zone_seeds:
                out.append(BenchInstance(f"train-{n}-s{seed}-zone", "training",
                                         training_trace(n, seed, persistent_zone=True)))
    return out


def run_instance(inst: BenchInstance, *, time_limit: float, workers: int, seed: int) -> dict:
    align = inst.alignment
    bound = lower_bound(inst.buffers, align)
    t0 = time.perf_counter()
    greedy = heuristic_layout(inst.buffers, alignment=align, methods=["greedy_by_size"])
    greedy_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    heur = heuristic_layout(inst.buffers, alignment=align)
    heur_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    plan = plan_layout(inst.buffers, alignment=align, time_limit=inst.time_limit or time_limit,
                       workers=workers, seed=seed)
    plan_s = time.perf_counter() - t0
    valid = not any(check_layout(inst.buffers, layout, align) for layout in (greedy, heur, plan))
    return {
        "name": inst.name,
        "kind": inst.kind,
        "buffers": len(inst.buffers),
        "alignment": align,
        "load_average": os.getloadavg()[0],
        "lower_bound": bound,
        "capacity": inst.capacity,
        "greedy_arena": greedy.arena_size,
        "greedy_ratio": greedy.arena_size / bound if bound else 1.0,
        "greedy_seconds": greedy_s,
        "best_heuristic": heur.method,
        "heuristics_arena": heur.arena_size,
        "heuristics_ratio": heur.arena_size / bound if bound else 1.0,
        "heuristics_seconds": heur_s,
        "plan_arena": plan.arena_size,
        "plan_ratio": plan.arena_size / bound if bound else 1.0,
        "plan_status": plan.status,
        "plan_method": plan.method,
        "plan_bound": plan.lower_bound,
        "plan_gap": plan.gap,
        "plan_seconds": plan_s,
        "plan_timed_out": plan.timed_out,
        "at_bound": plan.arena_size == bound,
        "bound_proven_unreachable": plan.lower_bound > bound,
        "reached_capacity": None if inst.capacity is None else plan.arena_size <= inst.capacity,
        "valid": valid,
    }


def run_bench(
    instances: Sequence[BenchInstance], *, time_limit: float = 60.0, workers: int = 1,
    seed: int = 0, verbose: bool = True,
) -> list[dict]:
    """Run every instance: greedy by size alone, all heuristics, and `plan_layout`."""
    rows = []
    for inst in instances:
        row = run_instance(inst, time_limit=time_limit, workers=workers, seed=seed)
        rows.append(row)
        if verbose:
            print(f"{row['name']:>22}: greedy x{row['greedy_ratio']:.6f} "
                  f"({row['greedy_seconds']:.2f} s), planner x{row['plan_ratio']:.6f} "
                  f"{row['plan_status']} {row['plan_method']} ({row['plan_seconds']:.2f} s, "
                  f"load {row['load_average']:.1f})", flush=True)
    return rows


def plan_rows(time_limit: float = 60.0, verbose: bool = True) -> list[dict]:
    """Keep-everything plans of the bench-scale models in bench/models/ (not the traces' own
    exports): the seconds of their layout phase, as `arenaplan plan` spends them."""
    from planner.ir.graph import load_graph
    from planner.pipeline import plan_graph
    from schemas.plan import PlanRequest

    rows = []
    for path in sorted(MODELS.glob("*.onnx")):
        if path.stem.startswith("trace_"):
            continue
        started = time.perf_counter()
        plan = plan_graph(load_graph(path), PlanRequest(budgets={"cpu": 1 << 50},
                                                        time_limit_s=time_limit))
        layout = [s for s in plan.solvers if s.phase == "layout"]
        device = plan.devices[0]
        row = {"model": path.stem, "buffers": len(plan.buffers),
               "storages": sum(b.owns_storage for b in plan.buffers),
               "layout_seconds": sum(s.seconds for s in layout),
               "layout_method": ",".join(s.method for s in layout),
               "layout_gap": max(s.gap or 0.0 for s in layout),
               "arena_bytes": device.arena_bytes, "live_bytes_bound": device.lower_bound_bytes,
               "plan_seconds": time.perf_counter() - started,
               "load_average": os.getloadavg()[0]}
        rows.append(row)
        if verbose:
            print(f"plan {row['model']}: layout {row['layout_seconds']:.2f} s "
                  f"({row['layout_method']}, gap {row['layout_gap']:.2e}), "
                  f"plan {row['plan_seconds']:.1f} s, load {row['load_average']:.1f}", flush=True)
    return rows


def carried_rows(previous: dict, rows: Sequence[dict], kinds: set[str] | None,
                 plans: Sequence[dict]) -> tuple[list[dict], list[dict]]:
    """Rows of the previous results (``previous``: results.json as written) not measured in
    this run, marked ``carried``: real traces whose CSV this checkout lacks (the large ones
    are written under bench/models/, which is not committed), and the plans of bench-scale
    models not planned (--no-plans, or the model is not in bench/models/). Kept rather than
    dropped from the committed results; the tables say which figures are from an earlier run."""
    ran = {r["name"] for r in rows}
    here = {f"trace-{name}" for name, _ in available_traces()}
    traces = []
    if kinds is None or "trace" in kinds:
        traces = [{**r, "carried": True} for r in previous.get("results", [])
                  if r["kind"] == "trace" and r["name"] not in ran and r["name"] not in here]
    planned = {p["model"] for p in plans}
    earlier = [{**p, "carried": True} for p in previous.get("plans", [])
               if p["model"] not in planned]
    return traces, sorted([*plans, *earlier], key=lambda p: p["model"])


def with_carried(rows: Sequence[dict], carried: Sequence[dict]) -> list[dict]:
    """``rows`` with the carried trace rows among the traces, by number of buffers."""
    traces = sorted([r for r in rows if r["kind"] == "trace"] + list(carried),
                    key=lambda r: (r["buffers"], r["name"]))
    first = next((k for k, r in enumerate(rows) if r["kind"] == "trace"), None)
    if first is None:
        first = sum(r["kind"] == "fixture" for r in rows)
    rest = [r for r in rows if r["kind"] != "trace"]
    return rest[:first] + traces + rest[first:]


def _name_cell(r: dict) -> str:
    return f"{r['name']} (earlier run)" if r.get("carried") else r["name"]


def _bound_cell(r: dict) -> str:
    if r["at_bound"]:
        return "at LB"
    gap = r["plan_arena"] / r["lower_bound"] - 1
    return f"+{gap:.2e}, " + ("LB proven unreachable" if r["bound_proven_unreachable"]
                               else "not proven")


def markdown_table(rows: Sequence[dict]) -> str:
    lines = [
        "| instance | buffers | align | lower bound (B) | greedy by size: arena/LB "
        "| best heuristic: arena/LB (which) | planner | status | method | planner s "
        "| load | valid |",
        "|---|---:|---:|---:|---:|---|---|---|---|---:|---:|---|",
    ]
    for r in rows:
        lines.append(
            f"| {_name_cell(r)} | {r['buffers']} | {r['alignment']} | {r['lower_bound']} "
            f"| {r['greedy_ratio']:.6f} | {r['heuristics_ratio']:.6f} ({r['best_heuristic']}) "
            f"| {_bound_cell(r)} | {r['plan_status']}"
            f"{' (time limit)' if r['plan_timed_out'] else ''} | {r['plan_method']} "
            f"| {r['plan_seconds']:.2f} | {r['load_average']:.1f} "
            f"| {'yes' if r['valid'] else 'NO'} |"
        )
    return "\n".join(lines) + "\n"


def summary(rows: Sequence[dict]) -> str:
    """The issue's targets, met or not, with the figures."""
    out = []
    for kind, limit, seconds in (("fixture", None, 1.0), ("trace", 5000, 1.0),
                                 ("trace", 15000, 10.0)):
        group = [r for r in rows if r["kind"] == kind and (limit is None or r["buffers"] <= limit)
                 and (limit != 15000 or r["buffers"] > 5000)]
        if not group:
            continue
        met = [r for r in group if r["at_bound"] and r["plan_seconds"] <= seconds]
        what = "fixture plans" if kind == "fixture" else (
            "real traces <= 5,000 buffers" if limit == 5000 else "real traces 5,001-15,000")
        carried = sum(bool(r.get("carried")) for r in group)
        note = f" ({carried} from an earlier run: input not in this checkout)" if carried else ""
        out.append(f"- {what}: {len(met)} of {len(group)} at the bound within {seconds:g} s; "
                   f"{sum(r['at_bound'] for r in group)} at the bound at all, "
                   f"{sum(r['bound_proven_unreachable'] for r in group)} proven unreachable"
                   f"{note}.")
    remat = [r for r in rows if r["kind"] == "remat"]
    if remat:
        fast = [r for r in remat if r["plan_seconds"] <= PLAN_LAYOUT_TARGET_S]
        gaps = ", ".join(f"{r['plan_ratio'] - 1:.2%}" for r in remat)
        out.append(f"- rematerialization traces ({REMAT_TIME_LIMIT:g} s limit, a plan's remat "
                   f"layout): {len(fast)} of {len(remat)} laid out within "
                   f"{PLAN_LAYOUT_TARGET_S:g} s (max {max(r['plan_seconds'] for r in remat):.2f}"
                   f" s); {sum(r['at_bound'] for r in remat)} at the bound, "
                   f"{sum(r['bound_proven_unreachable'] for r in remat)} proven unreachable; "
                   f"above the live bytes: {gaps}.")
    tight = [r for r in rows if r["kind"] == "tight"]
    if tight:
        mean = sum(r["plan_seconds"] for r in tight) / len(tight)
        out.append(f"- tight synthetic ({min(r['buffers'] for r in tight)}-"
                   f"{max(r['buffers'] for r in tight)} buffers): "
                   f"{sum(r['at_bound'] for r in tight)} of {len(tight)} solved, "
                   f"{mean:.2f} s on average (max {max(r['plan_seconds'] for r in tight):.2f} s).")
    return "\n".join(out) + "\n"


def plans_table(rows: Sequence[dict]) -> str:
    lines = ["| model (keep everything) | buffers | storages laid out | layout s | method "
             "| arena/LB | plan s | load |", "|---|---:|---:|---:|---|---:|---:|---:|"]
    for r in rows:
        lines.append(
            f"| {r['model']}{' (earlier run)' if r.get('carried') else ''} | {r['buffers']} "
            f"| {r['storages']} | {r['layout_seconds']:.2f} "
            f"| {r['layout_method']} | {r['arena_bytes'] / r['live_bytes_bound']:.6f} "
            f"| {r['plan_seconds']:.1f} | {r['load_average']:.1f} |")
    return "\n".join(lines) + "\n"


def write_results(rows: Sequence[dict], plans: Sequence[dict], settings: dict,
                  out_dir: Path = HERE) -> None:
    payload = {"settings": settings, "results": list(rows), "plans": list(plans)}
    (out_dir / "results.json").write_text(json.dumps(payload, indent=2) + "\n")
    header = (
        f"Time limit {settings['time_limit']:g} s, {settings['workers']} CP-SAT worker(s), "
        f"seed {settings['seed']}, {settings['machine']}; 'load' is the 1-minute load average "
        "of the 2-core machine (shared) when the instance finished.\n\n"
        "arena/LB: arena size over the live-bytes lower bound (1.000000 = proven optimal). "
        "'planner' is `plan_layout` (heuristics, then the hot window, the canonical search and "
        "CP-SAT when they miss the bound): 'at LB', or the gap left and whether the exact "
        "phase proved the bound unreachable. Fixtures: the buffers of their keep-everything "
        "plans (alignment 64). "
        "Traces: real keep-everything plans of bench-scale training steps "
        "(`python -m bench.layout.traces`, alignment 1). Tight instances are packed to 100% by "
        "construction (optimum = lower bound). Remat traces: the storages of rematerialization "
        f"schedules (alignment 64), with the time limit of a plan's remat layout "
        f"({REMAT_TIME_LIMIT:g} s); the target is at most {PLAN_LAYOUT_TARGET_S:g} s of layout."
        "\n\n"
    )
    text = header + summary(rows) + "\n" + markdown_table(rows)
    if plans:
        earlier = ("; rows marked (earlier run) are kept from the previous results, those "
                   "models were not planned in this run (--no-plans, or not in bench/models/)"
                   if any(p.get("carried") for p in plans) else "")
        text += ("\nLayout seconds of `plan_graph` keep-everything plans of the bench-scale "
                 f"models (time limit {settings['plan_time_limit']:g} s, the layout's share "
                 f"from planner.time_budget){earlier}:\n\n" + plans_table(plans))
    (out_dir / "results.md").write_text(text)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small instances only")
    parser.add_argument("--time-limit", type=float, default=60.0)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tight-seeds", type=int, default=5, metavar="N",
                        help="seeds 1..N of each tight instance size (default 5)")
    parser.add_argument("--out-dir", type=Path, default=HERE)
    parser.add_argument("--no-fixtures", action="store_true",
                        help="skip the fixture graphs' plans")
    parser.add_argument("--no-plans", action="store_true",
                        help="skip planning the bench-scale models")
    parser.add_argument("--only", default="", metavar="KINDS",
                        help="comma-separated kinds of instances to run (fixture, trace, tight, "
                             "training, remat); default all. Write a subset with --out-dir "
                             "elsewhere: the results files hold what was run")
    parser.add_argument("--plan-time-limit", type=float, default=60.0,
                        help="time limit of each bench-scale model's plan (default 60)")
    args = parser.parse_args(argv)
    if args.quick:
        instances = synthetic_instances((150,), (1,)) + training_instances((500,), (1,))
    else:
        seeds = tuple(range(1, args.tight_seeds + 1))
        instances = (trace_instances() + synthetic_instances(seeds=seeds) + training_instances()
                     + remat_instances())
    kinds = set(args.only.split(",")) if args.only else None
    if not args.no_fixtures and (kinds is None or "fixture" in kinds):
        instances = fixture_instances() + instances
    if kinds is not None:
        instances = [inst for inst in instances if inst.kind in kinds]
    rows = run_bench(instances, time_limit=args.time_limit, workers=args.workers, seed=args.seed)
    plans = [] if args.quick or args.no_plans else plan_rows(args.plan_time_limit)
    results = args.out_dir / "results.json"
    if not args.quick and results.exists():
        traces, plans = carried_rows(json.loads(results.read_text()), rows, kinds, plans)
        rows = with_carried(rows, traces)
    settings = {
        "time_limit": args.time_limit, "workers": args.workers, "seed": args.seed,
        "plan_time_limit": args.plan_time_limit,
        "machine": f"{platform.machine()}, {platform.python_implementation()} "
                   f"{platform.python_version()}",
    }
    write_results(rows, plans, settings, args.out_dir)
    print(summary(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
