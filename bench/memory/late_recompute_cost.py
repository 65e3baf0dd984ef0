"""What our late recomputation (schemas.late_recompute) saves and what it costs, per model.

    .venv/bin/python -m bench.memory.late_recompute_cost [--models a b] [--steps 10]

The rewrite makes cheap elementwise values (GELU, LayerNorm and BatchNorm outputs) again before
their backward readers instead of holding them, so the keep-everything plan itself recomputes:
its arena is smaller and its step does a few more elementwise passes. For each model as the CLI
plans it (ONNX Runtime's extended rewrite), the keep-everything plan of the graph with and
without the rewrite (`load_graph(late_recompute=...)`; the plan records which, and the runtime
rebuilds that graph), each planned in a process of its own: the arena, the predicted step and
the copies' share of it, and both plans' steps run interleaved in one process (median thread
CPU time, 1 thread). Writes late_recompute.json and late_recompute.md. An ample budget gets the
plan without the copies (planner.pipeline); this bench says what the copies cost where a budget
needs them.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.memory.run_memory_bench import OUT, SCALE_CASES
from schemas.units import format_bytes
from tests.support.fixture_zoo import fixture_names

COPY_SUFFIX = "/LateRecompute"  # schemas.late_recompute names its copies so
SIDES = ("without", "with")


def plan_side(name: str, side: str, tmp: Path) -> None:
    """Worker: the keep-everything plan of one side, written to tmp; its figures printed."""
    from bench.remat.run_budget_bench import keep_everything

    (tmp / side).mkdir(parents=True, exist_ok=True)
    keep = keep_everything(name, tmp / side, late_recompute=side == "with")
    copies = {op.id for op in keep.graph.ops if op.name.endswith(COPY_SUFFIX)}
    seconds = {p.op_id: p.costs["cpu"].median_seconds for p in keep.profile.ops}
    print(json.dumps({
        "ops": len(keep.graph.ops), "copies": len(copies),
        "arena_bytes": keep.plan.devices[0].arena_bytes,
        "predicted_s": keep.plan.predicted_seconds,
        "copies_share": sum(seconds[i] for i in copies) / sum(seconds.values()),
        "plan": str(keep.plan_path)}))


def run_both(name: str, plans: dict[str, str], steps: int) -> None:
    """Worker: both plans' steps interleaved."""
    from bench.remat.run_budget_bench import model_file
    from runtime.executor import PlanExecutor
    from runtime.inputs import generated_inputs
    from schemas.plan import Plan

    runners = {}
    for side in SIDES:  # each executor rebuilds the graph its plan records
        plan = Plan.model_validate_json(Path(plans[side]).read_text())
        runners[side] = PlanExecutor(str(model_file(name)), plan)
        runners[side].load_inputs(generated_inputs(plan))
    cpu: dict[str, list[float]] = {side: [] for side in SIDES}
    for k in range(steps + 1):
        for side, runner in runners.items():
            started = time.thread_time()
            runner.step()
            if k:  # the first step pages the arena in
                cpu[side].append(time.thread_time() - started)
    print(json.dumps({f"step_{side}_s": statistics.median(cpu[side]) for side in SIDES}))


def _worker(*args: str) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-m", "bench.memory.late_recompute_cost", *args],
                         capture_output=True, text=True, check=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench_model(name: str, steps: int, tmp: Path) -> dict:
    sides = {side: _worker("--plan-side", name, side, str(tmp)) for side in SIDES}
    ran = _worker("--run-both", name, sides["without"]["plan"], sides["with"]["plan"],
                  str(steps))
    return {"model": name, **{side: {k: v for k, v in figures.items() if k != "plan"}
                              for side, figures in sides.items()}, **ran}


def markdown(results: dict) -> str:
    lines = [
        "What the late recomputation of cheap values (schemas.late_recompute) saves and costs in "
        f"the keep-everything plan, per model. {results['machine']}; the graph as the CLI plans "
        "it (ONNX Runtime's extended rewrite), with and without the rewrite. *copies*: nodes "
        "it adds; *share*: their part of the predicted step (CPU profile, quick policy); "
        "*measured*: median thread CPU time of a step, both plans interleaved in one process "
        "(fused runtime, 1 thread), with / without.",
        "",
        "| model | ops | copies | arena without | arena with | with / without | predicted "
        "share | measured step without | with | with / without |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results["rows"]:
        without, with_ = r["without"], r["with"]
        lines.append(
            f"| {r['model']} | {without['ops']} | {with_['copies']} | "
            f"{format_bytes(without['arena_bytes'])} | {format_bytes(with_['arena_bytes'])} | "
            f"{with_['arena_bytes'] / without['arena_bytes']:.2f} | "
            f"{100 * with_['copies_share']:.1f}% | {1e3 * r['step_without_s']:.2f} ms | "
            f"{1e3 * r['step_with_s']:.2f} ms | {r['step_with_s'] / r['step_without_s']:.3f} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=[*fixture_names(), *SCALE_CASES])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--plan-side", nargs=3, metavar=("MODEL", "SIDE", "TMP"))
    parser.add_argument("--run-both", nargs=4, metavar=("MODEL", "WITHOUT", "WITH", "STEPS"))
    args = parser.parse_args()
    if args.plan_side:
        name, side, tmp = args.plan_side
        plan_side(name, side, Path(tmp))
        return 0
    if args.run_both:
        name, without, with_, steps = args.run_both
        run_both(name, {"without": without, "with": with_}, int(steps))
        return 0
    path = OUT / "late_recompute.json"
    old = json.loads(path.read_text()) if path.exists() else {}
    rows = {r["model"]: r for r in old.get("rows", [])}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models:
            rows[name] = bench_model(name, args.steps, Path(tmp))
            print(json.dumps(rows[name]), flush=True)
    machine = f"{platform.processor() or platform.machine()}, {platform.system()}"
    ordered = [rows[n] for n in [*fixture_names(), *SCALE_CASES] if n in rows]
    results = {"machine": machine, "steps": args.steps, "rows": ordered}
    path.write_text(json.dumps(results, indent=1))
    (OUT / "late_recompute.md").write_text(markdown(results))
    print(markdown(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
