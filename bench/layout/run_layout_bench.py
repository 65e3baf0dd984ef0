"""Layout benchmark: heuristics (greedy) vs the full planner (heuristics + CP-SAT).

    .venv/bin/python -m bench.layout.run_layout_bench [--quick] [--time-limit 60] [--workers 1]

Writes bench/layout/results.json and bench/layout/results.md. Instances:
- tight synthetic instances (100% packed by construction: the optimum equals the capacity and
  the live-bytes lower bound), 50 to 300 buffers, several seeds;
- training-step-like traces up to 5,000 buffers (with and without a persistent zone);
- the buffers of every fixture graph's plan (planned with no budget pressure, order optimized).
Other instances (e.g. the buffers of real fixture graphs) are added with
`bench_instances_from_buffers(name, buffers)` and `run_bench(instances)`.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.layout.generators import tight_instance, training_trace
from planner.layout import (
    Buffer,
    check_layout,
    heuristic_layout,
    lower_bound,
    plan_layout,
)
from planner.plan.live import storage_ranges

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class BenchInstance:
    name: str
    kind: str
    buffers: list[Buffer]
    capacity: int | None = None  # known optimum (tight instances), else None


def bench_instances_from_buffers(
    name: str, buffers: Sequence[Buffer], *, kind: str = "external", capacity: int | None = None
) -> BenchInstance:
    """Wrap any list of buffers (e.g. from a fixture graph's plan) as a benchmark instance."""
    return BenchInstance(name=name, kind=kind, buffers=list(buffers), capacity=capacity)


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
    sizes: Sequence[int] = (50, 100, 200, 300), seeds: Sequence[int] = (1, 2, 3, 4, 5)
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
    bound = lower_bound(inst.buffers)
    t0 = time.perf_counter()
    greedy = heuristic_layout(inst.buffers, methods=["greedy_by_size"])
    greedy_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    heur = heuristic_layout(inst.buffers)
    heur_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    plan = plan_layout(inst.buffers, time_limit=time_limit, workers=workers, seed=seed)
    plan_s = time.perf_counter() - t0
    valid = not check_layout(inst.buffers, greedy) and not check_layout(inst.buffers, heur) \
        and not check_layout(inst.buffers, plan)
    return {
        "name": inst.name,
        "kind": inst.kind,
        "buffers": len(inst.buffers),
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
            print(f"{row['name']:>22}: greedy x{row['greedy_ratio']:.4f} "
                  f"({row['greedy_seconds']:.2f} s), planner x{row['plan_ratio']:.4f} "
                  f"{row['plan_status']} {row['plan_method']} ({row['plan_seconds']:.2f} s)",
                  flush=True)
    return rows


def markdown_table(rows: Sequence[dict]) -> str:
    lines = [
        "| instance | buffers | lower bound (B) | greedy by size: arena/LB | greedy s "
        "| best heuristic: arena/LB (which) | heuristics s | planner: arena/LB | status "
        "| method | planner s | valid |",
        "|---|---:|---:|---:|---:|---|---:|---:|---|---|---:|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['name']} | {r['buffers']} | {r['lower_bound']} | {r['greedy_ratio']:.4f} "
            f"| {r['greedy_seconds']:.3f} | {r['heuristics_ratio']:.4f} ({r['best_heuristic']}) "
            f"| {r['heuristics_seconds']:.3f} | {r['plan_ratio']:.4f} | {r['plan_status']}"
            f"{' (time limit)' if r['plan_timed_out'] else ''} | {r['plan_method']} "
            f"| {r['plan_seconds']:.2f} | {'yes' if r['valid'] else 'NO'} |"
        )
    return "\n".join(lines) + "\n"


def write_results(rows: Sequence[dict], settings: dict, out_dir: Path = HERE) -> None:
    payload = {"settings": settings, "results": list(rows)}
    (out_dir / "results.json").write_text(json.dumps(payload, indent=2) + "\n")
    header = (
        f"Time limit {settings['time_limit']:g} s, {settings['workers']} CP-SAT worker(s), "
        f"seed {settings['seed']}, {settings['machine']}.\n\n"
        "arena/LB: arena size over the live-bytes lower bound (1.0000 = proven optimal). "
        "Tight instances are packed to 100% by construction (optimum = lower bound). "
        "'planner' is `plan_layout` (heuristics, then CP-SAT when they miss the bound).\n\n"
    )
    (out_dir / "results.md").write_text(header + markdown_table(rows))


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
    args = parser.parse_args(argv)
    if args.quick:
        instances = synthetic_instances((50, 100), (1,)) + training_instances((500,), (1,))
    else:
        seeds = tuple(range(1, args.tight_seeds + 1))
        instances = synthetic_instances(seeds=seeds) + training_instances()
    if not args.no_fixtures:
        instances = fixture_instances() + instances
    rows = run_bench(instances, time_limit=args.time_limit, workers=args.workers, seed=args.seed)
    settings = {
        "time_limit": args.time_limit, "workers": args.workers, "seed": args.seed,
        "machine": f"{platform.machine()}, {platform.python_implementation()} "
                   f"{platform.python_version()}",
    }
    write_results(rows, settings, args.out_dir)
    print(markdown_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
