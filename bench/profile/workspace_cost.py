"""The whole-graph workspace measurement's estimated cost against measured ones.

    .venv/bin/python -m bench.profile.workspace_cost [--models NAME ...] [--predict-only]

planner.profile.graph_workspace skips its measurement when the estimate of
planner.profile.graph_workspace_cost does not fit a request's time left, and a plan then
reserves the conservative shape bound instead of measured scratch. Here every fixture and bench
model (ONNX Runtime's extended rewrite, the CLI's default; CPU, one thread) is measured as that
module measures it, in this process, one model at a time: drawing the graph inputs
(`graph_input_values`), then `measure_graph_workspace` on those values (session build with
ONNX Runtime's profiler on, RUNS runs, reading the profile), and separately one session build
to split the latter's seconds. The wall clock is what a time limit counts; the process's CPU
seconds beside it show the shared machine's load.

Measured figures are kept in workspace_cost.json and a rerun measures only the models named
(or missing); predictions are always recomputed from the current cost model, and the table
(workspace_cost.md) gives measured/predicted per part.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from planner.ir.graph import Graph, load_graph
from planner.profile.devices import Device, create_session
from planner.profile.graph_workspace import RUNS, measure_graph_workspace
from planner.profile.graph_workspace_cost import measurement_cost
from planner.profile.inputs import graph_input_values
from tests.support.fixture_zoo import REQUIRED, model_path

OUT = Path(__file__).resolve().parent
BENCH_DIR = OUT.parent / "models"
BENCH = ("mobilenet_v2_momentum", "resnet18_momentum", "unet_adam", "vgg11_sgd",
         "bert_small_adam", "gpt2_small_adam")
MODELS = (*REQUIRED, *BENCH)


def load(name: str) -> Graph:
    path = BENCH_DIR / f"{name}.onnx" if name in BENCH else model_path(name)
    return load_graph(path, optimization="extended")


def measure(graph: Graph) -> dict[str, float]:
    """Wall seconds of each part of one whole-graph measurement of `graph` on the CPU."""
    cpu = Device("cpu")
    wall, used = time.perf_counter(), time.process_time()
    values = graph_input_values(graph)
    draw_s = time.perf_counter() - wall
    with tempfile.TemporaryDirectory(prefix="workspace-cost-") as scratch:
        built = time.perf_counter()
        session = create_session(graph.proto, cpu, 1, profile_prefix=f"{scratch}/s")
        session_s = time.perf_counter() - built
        os.remove(session.end_profiling())
        del session
    found = measure_graph_workspace(graph, cpu, values=values)
    assert found.measured, found.reason
    total_s = draw_s + found.seconds
    return {"draw_s": draw_s, "session_s": session_s,
            "step_s": (found.seconds - session_s) / RUNS, "total_s": total_s,
            "cpu_s": time.process_time() - used, "load_1min": os.getloadavg()[0]}


def predict(graph: Graph) -> dict[str, float]:
    cost = measurement_cost(graph, 1)
    return {"setup_s": cost.setup_s, "step_s": cost.step_s, "longest_op_s": cost.longest_op_s,
            "total_s": cost.total(RUNS)}


def table(rows: dict[str, dict]) -> str:
    lines = [
        "# Whole-graph workspace measurement: estimated cost against measured (CPU, one thread)",
        "",
        "Written by bench/profile/workspace_cost.py. Extended rewrite; wall seconds on the "
        f"development machine (2 shared cores, other processes running: `cpu` is this "
        f"process's CPU seconds for the same work). `total` = inputs drawn + session built + "
        f"{RUNS} runs with the profile read; ratios are measured / predicted (below 1: the "
        "estimate is on the safe side).",
        "",
        "| model | nodes | measured setup | predicted setup | measured step | predicted step | "
        "step ratio | measured total | cpu | predicted total | total ratio |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, row in rows.items():
        m, p = row["measured"], row["predicted"]
        setup = m["draw_s"] + m["session_s"]
        lines.append(
            f"| {name} | {row['nodes']} | {setup:.2f} | {p['setup_s']:.2f} | {m['step_s']:.2f} | "
            f"{p['step_s']:.2f} | {m['step_s'] / p['step_s']:.2f} | {m['total_s']:.2f} | "
            f"{m['cpu_s']:.2f} | {p['total_s']:.2f} | {m['total_s'] / p['total_s']:.2f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=MODELS, metavar="NAME")
    parser.add_argument("--predict-only", action="store_true",
                        help="measure nothing: recompute the predictions of the kept figures")
    args = parser.parse_args()
    path = OUT / "workspace_cost.json"
    kept = json.loads(path.read_text()) if path.exists() else {}
    rows = {}
    for name in MODELS:
        graph = load(name)
        wanted = not args.predict_only and (name in (args.models or ()) or name not in kept)
        if wanted:
            measured = measure(graph)
            print(f"{name}: {measured}", flush=True)
        elif name in kept:
            measured = kept[name]["measured"]
        else:
            continue
        rows[name] = {"nodes": len(graph.ops), "measured": measured, "predicted": predict(graph)}
        del graph
    path.write_text(json.dumps(rows, indent=1) + "\n")
    (OUT / "workspace_cost.md").write_text(table(rows))
    print(table(rows))


if __name__ == "__main__":
    main()
