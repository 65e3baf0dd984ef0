"""`arenaplan validate MODEL.onnx PLAN.json`: check a plan with the independent validator.

For CI jobs that fetch a plan and check it before they run it: the plan is replayed against the
model by `planner.plan.validate.validate_plan`, which shares no code with the solvers. Exit 0
when the plan is valid, 1 when it is not (one reason per line), 2 when the input is bad (an
unreadable file, JSON that is not a plan, a plan made for another model).
"""

from __future__ import annotations

import argparse
import hashlib
from pathlib import Path

from arenaplan.cli.common import EXIT_OK

EXIT_INVALID = 1


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "validate", help="check a plan against its model with the independent validator",
        description="Replay PLAN.json against MODEL.onnx: dependencies, budgets, arena overlaps, "
        "outputs. Exit 0 valid, 1 invalid (the reasons are printed), 2 bad input.",
    )
    parser.add_argument("model", help="the ONNX training graph the plan was made for")
    parser.add_argument("plan", help="plan JSON written by `arenaplan plan` or the service")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from planner.ir.graph import load_plan_graph
    from planner.ir.onnx_model import read_model_bytes
    from planner.plan.validate import validate_plan
    from runtime.errors import ModelMismatchError
    from runtime.plan_io import read_plan
    from schemas.units import format_bytes

    plan = read_plan(args.plan)
    model = read_model_bytes(Path(args.model))
    sha256 = hashlib.sha256(model).hexdigest()
    if plan.model_sha256 != sha256:
        raise ModelMismatchError(
            f"plan {plan.plan_id} was made for another model (plan sha256 "
            f"{plan.model_sha256[:12]}..., {args.model} {sha256[:12]}...); validate it against "
            "the model it was made for")
    report = validate_plan(load_plan_graph(model, plan), plan)
    if not report.ok:
        print(f"plan {plan.plan_id} is INVALID ({len(report.errors)} problem(s)):")
        for error in report.errors:
            print(f"  {error}")
        return EXIT_INVALID
    peaks = ", ".join(f"{device} peak {format_bytes(max(curve, default=0))}"
                      for device, curve in sorted(report.live_bytes.items()))
    print(f"plan {plan.plan_id} is valid for {args.model}" + (f" ({peaks})" if peaks else ""))
    return EXIT_OK
