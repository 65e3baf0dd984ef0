"""`arenaplan max-batch MODEL.onnx --budget cpu=512MiB [--dim-name batch]`: the largest batch
whose plan fits the budgets (doubling, then bisection, CalcGraph's search)."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from arenaplan.cli.common import EXIT_INFEASIBLE, EXIT_OK
from arenaplan.cli.options import add_request_options
from arenaplan.cli.request import request_from_args


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "max-batch", help="largest batch whose plan fits the budgets",
        description="Bind the model's symbolic batch dim to 1, 2, 4, ... until no plan fits "
        "the budgets, then bisect; print the largest value that fits (exit 3 when even 1 does "
        "not). --time-limit bounds the whole search: each plan gets a third of the time left, "
        "and when it is spent the largest value found so far is the answer.",
    )
    parser.add_argument("model", help="path to the ONNX training graph (symbolic batch dim)")
    add_request_options(parser)
    parser.add_argument("--dim-name", default="batch",
                        help="the symbolic dim to search over (default batch)")
    parser.add_argument("--max", type=int, default=1 << 16, metavar="N",
                        help="largest value tried (default 65536)")
    parser.add_argument("-o", "--output", metavar="PLAN.json",
                        help="write the plan of the largest batch that fits")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from planner.queries import max_batch

    started = time.perf_counter()
    request = request_from_args(args)
    result = max_batch(Path(args.model), request, args.dim_name, limit=args.max,
                       started=started)
    if args.output and result.plan is not None:
        Path(args.output).write_text(result.plan.model_dump_json(indent=1))
    tried = {str(k): v for k, v in sorted(result.tried.items())}
    if args.json:
        print(json.dumps({"dim": result.dim, "max": result.value, "tried": tried,
                          "complete": result.complete}))
    else:
        print(f"largest {result.dim} that fits: {result.value} (tried "
              + ", ".join(f"{k}{'' if v else ' x'}" for k, v in tried.items()) + ")"
              + ("" if result.complete else "; the time limit ended the search: a larger value "
                 "may fit (raise --time-limit)"))
    return EXIT_OK if result.value > 0 else EXIT_INFEASIBLE
