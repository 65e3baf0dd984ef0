"""`arenaplan plan MODEL.onnx --budget cpu=512MiB [--budget cuda:0=2GiB] -o plan.json`: plan a
training step; `arenaplan plan --graph-json G.json --budget cpu=...` plans a node-link DAG (the
Checkmate benchmark format) with the same solvers, plan builder and validator."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from arenaplan.cli.common import EXIT_OK
from arenaplan.cli.options import add_request_options
from arenaplan.cli.request import request_from_args
from planner.errors import InvalidInputError
from schemas.units import format_bytes


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "plan", help="plan a training step within per-device memory budgets",
        description="Order, rematerialize / place (when the budget needs it or several devices "
        "are given), lay out and validate a plan for MODEL.onnx (or a node-link JSON graph). "
        "Exit 0 with a plan, 3 when the budget is too small (the message gives the smallest "
        "feasible one or a proven lower bound), 2 on bad input.",
    )
    parser.add_argument("model", nargs="?", help="path to the ONNX training graph")
    parser.add_argument("--graph-json", metavar="G.json",
                        help="plan a networkx node-link JSON DAG instead of an ONNX model "
                        "(nodes with cost_cpu, cost_ram, optional backward, name)")
    add_request_options(parser)
    parser.add_argument("-o", "--output", required=True, help="where to write the plan JSON")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from planner.pipeline import plan_graph, plan_model  # heavy imports: only when planning

    if (args.model is None) == (args.graph_json is None):
        raise InvalidInputError("give either MODEL.onnx or --graph-json G.json")
    request = request_from_args(args)

    def progress(phase: str, info: dict) -> None:
        print(f"arenaplan: {phase} {info or ''}".rstrip(), file=sys.stderr)

    if args.graph_json:
        from planner.ir.graph_json import read_graph_json
        from planner.pipeline.collector import fewer_collections

        started = time.perf_counter()  # reading the graph counts against the limit
        with fewer_collections():
            graph, profile = read_graph_json(args.graph_json)
        if request.profile is None:
            request = request.model_copy(update={"profile": profile})
        plan = plan_graph(graph, request, progress=progress, started=started)
    else:
        plan = plan_model(Path(args.model), request, progress=progress)
    Path(args.output).write_text(plan.model_dump_json(indent=1))
    for device in plan.devices:
        print(
            f"{device.device}: arena {format_bytes(device.arena_bytes)} "
            f"(live-bytes lower bound {format_bytes(device.lower_bound_bytes)}, "
            f"budget {format_bytes(device.budget_bytes)})"
        )
    for report in plan.solvers:
        where = f" {report.device}" if report.device else ""
        gap = f", gap {report.gap:.1%}" if report.gap is not None else ""
        print(f"{report.phase}{where}: {report.method} {report.status}{gap} "
              f"in {report.seconds:.2f} s")
    if plan.predicted_seconds is not None:
        print(f"predicted step time {plan.predicted_seconds * 1e3:.3f} ms")
    print(f"plan {plan.plan_id} written to {args.output}")
    return EXIT_OK
