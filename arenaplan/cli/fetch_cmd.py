"""`arenaplan fetch ID --server URL -o plan.json`: download a plan the service has made.

Exit codes: 0 written; 2 unknown id, failed job (its reason printed), unreachable server or bad
key; 3 the job failed because the budget is infeasible (the message gives the smallest feasible
budget); 4 still solving after --wait seconds. The API key, when the server needs one, comes from
$ARENAPLAN_API_KEY or --api-key-file.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from arenaplan.cli.common import EXIT_OK

EXIT_PENDING = 4


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "fetch", help="download a plan by id from a planning service",
        description=__doc__.split("\n\n", 1)[1],
    )
    parser.add_argument("plan_id", metavar="ID", help="plan id (from `arenaplan plan-id`)")
    parser.add_argument("--server", required=True, help="service URL, e.g. http://127.0.0.1:8000")
    parser.add_argument("-o", "--output", required=True, help="where to write the plan JSON")
    parser.add_argument("--wait", type=float, default=0.0, metavar="S",
                        help="keep polling this many seconds while the plan is solving")
    parser.add_argument("--api-key-file", metavar="F",
                        help="file holding the API key (default: $ARENAPLAN_API_KEY)")
    parser.add_argument("--timeout", type=float, default=60.0, metavar="S",
                        help="per-request network timeout (default 60)")
    parser.set_defaults(handler=run)


def _api_key(args: argparse.Namespace) -> str | None:
    from schemas.errors import ArenaplanError

    if not args.api_key_file:
        return None  # the client falls back to $ARENAPLAN_API_KEY
    try:
        return Path(args.api_key_file).read_text().strip() or None
    except OSError as exc:
        raise ArenaplanError(f"cannot read {args.api_key_file}: {exc.strerror}") from None


def run(args: argparse.Namespace) -> int:
    from runtime.client import fetch_plan_bytes
    from runtime.errors import PlanNotReadyError
    from runtime.plan_io import parse_plan
    from schemas.errors import ArenaplanError

    try:
        body = fetch_plan_bytes(args.server, args.plan_id, api_key=_api_key(args),
                                timeout_s=args.timeout, wait_s=max(0.0, args.wait))
    except PlanNotReadyError as exc:
        print(f"arenaplan: {exc}", file=sys.stderr)
        return EXIT_PENDING
    plan = parse_plan(body)
    if plan.plan_id != args.plan_id:
        raise ArenaplanError(f"the server answered plan {plan.plan_id}, not {args.plan_id}")
    Path(args.output).write_bytes(body)  # byte for byte what the server stored
    print(f"plan {plan.plan_id} written to {args.output}")
    return EXIT_OK
