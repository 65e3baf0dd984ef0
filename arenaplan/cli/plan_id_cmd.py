"""`arenaplan plan-id MODEL.onnx --budget cpu=512MiB`: the id the service gives that plan.

Plan ids are a hash of the model bytes, the canonical request and the planner version, so CI can
compute the id it wants offline, then `arenaplan fetch` it from a server.
"""

from __future__ import annotations

import argparse
import hashlib
from pathlib import Path

from arenaplan.cli.common import EXIT_OK
from arenaplan.cli.options import add_request_options
from arenaplan.cli.request import request_from_args


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "plan-id", help="print the deterministic id of a plan, offline",
        description="Print the id a server gives the plan of MODEL.onnx for this request (the "
        "same options as `arenaplan plan`); nothing is solved. Exit 2 on bad input.",
    )
    parser.add_argument("model", help="path to the ONNX training graph")
    add_request_options(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from planner.version import PLANNER_VERSION
    from schemas.errors import ArenaplanError
    from schemas.plan import compute_plan_id

    request = request_from_args(args)
    try:
        data = Path(args.model).read_bytes()
    except OSError as exc:
        raise ArenaplanError(f"cannot read the model {args.model}: {exc.strerror}") from None
    print(compute_plan_id(hashlib.sha256(data).hexdigest(), request, PLANNER_VERSION))
    return EXIT_OK
