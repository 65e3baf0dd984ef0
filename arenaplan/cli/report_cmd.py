"""`arenaplan report PLAN.json [-m MODEL.onnx] -o report.html [--png-dir DIR]`: show a plan.

Writes one self-contained HTML page (summary, memory over the steps per device with the budget
line, compute/keep matrices, arena maps, step list); `-m` adds the op regions from the plan's
model (refused when it is another model); `--png-dir` also writes the figures as PNG files
(needs the `report` extra, matplotlib).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from arenaplan.cli.common import EXIT_OK


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "report", help="an HTML report of a plan: memory curves, schedule matrices, arena maps",
        description="Render PLAN.json as one self-contained HTML page (no network fetches). "
        "Exit 0 on success, 2 on bad input.",
    )
    parser.add_argument("plan", help="plan JSON written by `arenaplan plan` or the service")
    parser.add_argument("-m", "--model", help="the plan's ONNX model: adds op regions")
    parser.add_argument("-o", "--output", required=True, help="where to write the HTML page")
    parser.add_argument("--png-dir", help="also write each figure as PNG here (matplotlib)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from planner.ir.graph import load_plan_graph
    from planner.report import build_report_data, export_pngs
    from planner.report.page import render_data_html
    from runtime.plan_io import read_plan

    plan = read_plan(args.plan)
    graph = load_plan_graph(Path(args.model), plan) if args.model else None
    data = build_report_data(plan, graph)
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_data_html(data), encoding="utf-8")
    print(f"report of plan {plan.plan_id} written to {out}")
    if args.png_dir:
        for png in export_pngs(data, args.png_dir):
            print(f"figure written to {png}")
    return EXIT_OK
