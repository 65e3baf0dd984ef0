"""`arenaplan inspect MODEL.onnx`: load a model into the IR and print what the planner sees."""

from __future__ import annotations

import argparse

from arenaplan.cli.common import EXIT_OK
from arenaplan.cli.options import add_dims_option
from planner.ir.graph import load_graph
from planner.ir.summary import one_line, summarize


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "inspect", help="summarize an ONNX training graph (ops, tensors, parameters, bytes)",
        description="Load MODEL.onnx into the planner's IR and print a one-line summary.",
    )
    parser.add_argument("model", help="path to the ONNX model")
    add_dims_option(parser)
    parser.add_argument("--json", action="store_true", help="print the GraphSummary as JSON")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    graph = load_graph(args.model, dims=dict(args.dims))
    summary = summarize(graph)
    print(summary.model_dump_json(indent=2) if args.json else one_line(summary))
    return EXIT_OK
