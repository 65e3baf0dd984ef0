"""Planning the graph ONNX Runtime would run: step time and results per optimization level.

    .venv/bin/python -m bench.runtime.optimized_graphs [--models mlp_sgd vgg11_sgd ...]
        [--steps 6] [--warmup 1]

For each model (test fixtures, and bench-scale models from bench/models when that cache holds
them) one fresh process, pinned to one core, plans the step at 100% budget with
`graph_optimization` = disable, basic and extended, each with a (cached) profile of the graph it
plans, as `arenaplan plan --profile` does, so that the plan carries its kernel workspace (the
host arena of its kernels' scratch, runtime.host_workspace). It runs the three plans in the
runtime (segments, one thread) interleaved step by step with ONNX Runtime's default session (all
graph optimizations, one thread) on the model as sent, each training from the same inputs with
its state fed back. Reported: the median wall and CPU time (the thread's) per step of each,
their ratios to ONNX Runtime's (on a shared machine the CPU time is the steadier figure: a wall
time also counts the waits for the core), and the largest difference of any output of any step
from ONNX Runtime's (absolute, and relative to that output's largest magnitude): what
`arenaplan run --check` compares.

Writes bench/runtime/optimized_graphs.json and bench/runtime/optimized_graphs.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.runtime.run_runtime_bench import machine
from tests.support.fixture_zoo import FIXTURE_DIR

REPO = Path(__file__).resolve().parents[2]
OUT = Path(__file__).resolve().parent
BENCH_MODELS = REPO / "bench" / "models"
DEFAULT_MODELS = ("mlp_sgd", "cnn_bn_momentum", "unet_small", "resnet_cifar", "gpt2_tiny_adam",
                  "resnet18_narrow", "vgg11_sgd", "resnet18_momentum", "mobilenet_v2_momentum",
                  "unet_adam", "bert_small_adam", "gpt2_small_adam")
LEVELS = ("disable", "basic", "extended")
GENEROUS = 2**40


def model_files(name: str) -> tuple[Path, Path] | None:
    for folder in (FIXTURE_DIR, BENCH_MODELS):
        model, inputs = folder / f"{name}.onnx", folder / f"{name}.inputs.npz"
        if model.exists() and inputs.exists():
            return model, inputs
    return None


def worker(model_path: str, inputs_path: str, steps: int, warmup: int) -> dict:
    """Plan at every level, then step the three plans and ONNX Runtime's default in turn."""
    import numpy as np

    from planner.ir.graph import load_graph
    from planner.pipeline import plan_model
    from planner.profile import QUICK_POLICY, profile_graph
    from runtime.executor import PlanExecutor
    from runtime.model import read_model
    from runtime.reference import ReferenceSession, compare_outputs
    from schemas.plan import PlanRequest

    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[-1]})
    model = read_model(model_path)
    values = dict(np.load(inputs_path))
    rows: dict[str, dict] = {}
    runners = {}
    for level in LEVELS:
        started = time.perf_counter()
        graph = load_graph(model_path, optimization=level)
        profile = profile_graph(graph, inputs=values, policy=QUICK_POLICY)
        plan = plan_model(model_path, PlanRequest(budgets={"cpu": GENEROUS}, time_limit_s=10,
                                                  graph_optimization=level, profile=profile))
        plan_s = time.perf_counter() - started
        runners[level] = PlanExecutor(model, plan)
        rows[level] = {"plan_seconds": plan_s,
                       "compute_steps": sum(1 for s in plan.steps if s.kind == "compute"),
                       "arena_bytes": plan.devices[0].arena_bytes,
                       "workspace_bytes": plan.devices[0].workspace_bytes,
                       "segments": runners[level].segment_count}
    reference = ReferenceSession(model, plan.state_updates, optimization="all")
    for runner in [*runners.values(), reference]:
        runner.load_inputs(values)
    wall: dict[str, list[float]] = {name: [] for name in [*LEVELS, "ort_default"]}
    cpu: dict[str, list[float]] = {name: [] for name in wall}
    worst = {level: (0.0, 0.0) for level in LEVELS}
    for k in range(warmup + steps):
        for name, step in [*((lv, runners[lv].step) for lv in LEVELS),
                           ("ort_default", reference.step)]:
            w0, c0 = time.perf_counter(), time.thread_time()
            step()
            c1, w1 = time.thread_time(), time.perf_counter()
            if k >= warmup:
                wall[name].append(w1 - w0)
                cpu[name].append(c1 - c0)
        for level in LEVELS:
            diffs = compare_outputs(runners[level].outputs(), reference.last)
            scale = {n: float(np.max(np.abs(v))) if v.size else 0.0
                     for n, v in reference.last.items()}
            absolute = max(diffs.values())
            relative = max((d / scale[n] for n, d in diffs.items() if scale[n] > 0), default=0.0)
            worst[level] = (max(worst[level][0], absolute), max(worst[level][1], relative))
    ort_s = statistics.median(wall["ort_default"])
    ort_cpu_s = statistics.median(cpu["ort_default"])
    for level in LEVELS:
        median = statistics.median(wall[level])
        median_cpu = statistics.median(cpu[level])
        rows[level].update({"step_seconds": median, "vs_ort_default": median / ort_s,
                            "step_cpu_seconds": median_cpu,
                            "cpu_vs_ort_default": median_cpu / ort_cpu_s,
                            "max_abs_diff": worst[level][0], "max_rel_diff": worst[level][1]})
    return {"ort_default_step_seconds": ort_s, "ort_default_step_cpu_seconds": ort_cpu_s,
            "levels": rows, "steps": steps}


def spawn(name: str, model: Path, inputs: Path, args: argparse.Namespace) -> dict:
    command = [sys.executable, "-m", "bench.runtime.optimized_graphs", "--worker", str(model),
               str(inputs), "--steps", str(args.steps), "--warmup", str(args.warmup)]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def write_markdown(results: dict, path: Path) -> None:
    m = results["machine"]
    lines = [
        "# Planning ONNX Runtime's optimized graph",
        "",
        f"`python -m bench.runtime.optimized_graphs` on {m['cpu']} (pinned to one core, one "
        f"thread), onnxruntime {m['onnxruntime']}; load average before/after "
        f"{results['load_before']} / {m['load_average']} (shared machine: timings are noisy). "
        f"Median of {results['steps']} interleaved steps after warm-up, wall and CPU time (the "
        "thread's); step time relative to ONNX Runtime's default session (all optimizations) on "
        "the model as sent; plans made with a profile of the graph they plan, so each carries "
        "its kernel workspace (the host arena of its kernels' scratch); largest difference of "
        "any output of any step from that session (absolute / relative to the output's largest "
        "magnitude).",
        "",
        "| model | level | compute steps | segments | workspace KiB | step ms | vs ORT default "
        "| CPU ms | CPU vs ORT default | max abs diff | max rel diff |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, row in results["models"].items():
        if "error" in row:
            lines.append(f"| {name} | error: {row['error']} | | | | | | | | | |")
            continue
        lines.append(f"| {name} | ORT default | | | | {row['ort_default_step_seconds'] * 1e3:.2f} "
                     f"| 1.00 | {row['ort_default_step_cpu_seconds'] * 1e3:.2f} | 1.00 | | |")
        for level, r in row["levels"].items():
            lines.append(
                f"| {name} | {level} | {r['compute_steps']} | {r['segments']} | "
                f"{r['workspace_bytes'] // 1024:,} | {r['step_seconds'] * 1e3:.2f} | "
                f"{r['vs_ort_default']:.2f} | {r['step_cpu_seconds'] * 1e3:.2f} | "
                f"{r['cpu_vs_ort_default']:.2f} | {r['max_abs_diff']:.1e} | "
                f"{r['max_rel_diff']:.1e} |")
    path.write_text("\n".join(lines) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=list(DEFAULT_MODELS))
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--worker", nargs=2, metavar=("MODEL", "INPUTS"), help=argparse.SUPPRESS)
    parser.add_argument("--merge", action="store_true",
                        help="keep the other models of an existing optimized_graphs.json")
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(*args.worker, args.steps, args.warmup)))
        return 0
    results: dict = {"load_before": list(os.getloadavg()), "steps": args.steps, "models": {}}
    if args.merge and (OUT / "optimized_graphs.json").exists():
        results["models"] = json.loads((OUT / "optimized_graphs.json").read_text())["models"]
    for name in args.models:
        files = model_files(name)
        if files is None:
            print(f"{name}: not found (bench/models is a gitignored cache)", file=sys.stderr)
            continue
        results["models"][name] = spawn(name, *files, args)
        print(name, json.dumps(results["models"][name])[:300], file=sys.stderr, flush=True)
    results["machine"] = machine()
    (OUT / "optimized_graphs.json").write_text(json.dumps(results, indent=1) + "\n")
    write_markdown(results, OUT / "optimized_graphs.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
