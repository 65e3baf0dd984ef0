"""`arenaplan demo`: the end-to-end example on the bundled fixture training graphs.

For each model in a directory: load it, summarize it, plan it with no budget pressure, validate
the plan and report the arena against the live-bytes lower bound and the file order's peak (what
ONNX Runtime's order would need). It exercises every planner phase on real graphs in seconds.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from arenaplan.cli.common import EXIT_OK
from schemas.units import format_bytes

NO_PRESSURE = 2**40  # a budget no fixture comes near: the plan shows the no-recomputation arena


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "demo", help="plan every model in a folder end to end (the bundled fixtures by default)",
        description=__doc__.splitlines()[0],
    )
    parser.add_argument("folder", nargs="?", default="tests/fixtures",
                        help="folder of .onnx training graphs (default tests/fixtures)")
    parser.add_argument("--time-limit", type=float, default=5.0, metavar="S",
                        help="solver time limit per model (default 5)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from planner.ir.graph import load_graph
    from planner.ir.summary import one_line, summarize
    from planner.pipeline import plan_model
    from schemas.plan import PlanRequest

    models = sorted(Path(args.folder).glob("*.onnx"))
    if not models:
        from schemas.errors import ArenaplanError

        raise ArenaplanError(f"no .onnx files in {args.folder}")
    for path in models:
        graph = load_graph(path)
        print(one_line(summarize(graph)))
        plan = plan_model(path, PlanRequest(budgets={"cpu": NO_PRESSURE},
                                            time_limit_s=args.time_limit))
        device = plan.devices[0]
        order = next(r for r in plan.solvers if r.phase == "order")
        assert order.baseline is not None, "the order phase reports the file-order peak"
        print(
            f"  plan {plan.plan_id}: {len(plan.steps)} steps, arena "
            f"{format_bytes(device.arena_bytes)} (lower bound "
            f"{format_bytes(device.lower_bound_bytes)}), file-order peak "
            f"{format_bytes(int(order.baseline))}, order by {order.method}, validated"
        )
    return EXIT_OK
