"""`arenaplan plan MODEL.onnx --budget cpu=512MiB -o plan.json`: plan a training step."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from arenaplan.cli.common import EXIT_OK
from arenaplan.cli.options import add_request_options
from arenaplan.cli.request import request_from_args
from planner.summary import format_bytes


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "plan", help="plan a training step within per-device memory budgets",
        description="Order, lay out and validate a plan for MODEL.onnx. Exit 0 with a plan, "
        "3 when the budget is too small (the message gives the smallest feasible one), "
        "2 on bad input.",
    )
    parser.add_argument("model", help="path to the ONNX training graph")
    add_request_options(parser)
    parser.add_argument("-o", "--output", required=True, help="where to write the plan JSON")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from planner.pipeline import plan_model  # solver imports are heavy: only when planning

    request = request_from_args(args)

    def progress(phase: str, info: dict) -> None:
        print(f"arenaplan: {phase} {info or ''}".rstrip(), file=sys.stderr)

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
    print(f"plan {plan.plan_id} written to {args.output}")
    return EXIT_OK
