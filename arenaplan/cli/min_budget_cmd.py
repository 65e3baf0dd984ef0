"""`arenaplan min-budget MODEL.onnx [--device cpu]`: the smallest budget a plan fits in."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from arenaplan.cli.common import EXIT_OK
from arenaplan.cli.options import (
    add_dims_option,
    add_graph_optimization_option,
    add_solver_options,
)
from arenaplan.cli.request import _read_profile as read_profile
from planner.errors import InvalidInputError
from schemas.units import format_bytes


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "min-budget", help="smallest budget on one device: proven lower bound and achieved",
        description="Search the smallest budget on DEVICE for which arenaplan returns a "
        "validated plan (with rematerialization), and print it beside the lower bound no plan "
        "can beat and the arena without recomputation.",
    )
    parser.add_argument("model", nargs="?", help="path to the ONNX training graph")
    parser.add_argument("--graph-json", metavar="G.json", help="a node-link JSON DAG instead")
    parser.add_argument("--device", default="cpu", help="device to size (default cpu)")
    add_dims_option(parser)
    add_graph_optimization_option(parser)
    add_solver_options(parser, 60.0, "total solver time in seconds")
    parser.add_argument("-o", "--output", metavar="PLAN.json",
                        help="write the plan made at the achieved budget")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from planner.ir.graph import load_graph
    from planner.queries import min_budget
    from schemas.plan import check_device_name

    if (args.model is None) == (args.graph_json is None):
        raise InvalidInputError("give either MODEL.onnx or --graph-json G.json")
    try:
        check_device_name(args.device)
    except ValueError as exc:
        raise InvalidInputError(str(exc)) from None
    profile = read_profile(args.profile) if args.profile else None
    started = time.perf_counter()  # reading the graph counts against the limit, as in plan
    if args.graph_json:
        from planner.ir.graph_json import read_graph_json

        graph, built = read_graph_json(args.graph_json)
        profile = profile or built
    else:
        graph = load_graph(Path(args.model), dims=dict(args.dims),
                           optimization=args.graph_optimization, devices=[args.device])
    result = min_budget(graph, args.device, profile=profile, time_limit=args.time_limit,
                        workers=args.workers, seed=args.seed, started=started)
    if args.output:
        Path(args.output).write_text(result.plan.model_dump_json(indent=1))
    if args.json:
        print(json.dumps({"device": result.device, "lower_bound_bytes": result.lower_bound,
                          "achieved_bytes": result.achieved,
                          "keep_all_arena_bytes": result.keep_all_arena,
                          "seconds": round(result.seconds, 3)}))
    else:
        print(f"{result.device}: smallest budget achieved {format_bytes(result.achieved)} "
              f"({result.achieved} B, a validated plan), proven lower bound "
              f"{format_bytes(result.lower_bound)} ({result.lower_bound} B), without "
              f"recomputation {format_bytes(result.keep_all_arena)}")
    return EXIT_OK
