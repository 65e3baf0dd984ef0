"""The `arenaplan` command line: a thin front end over planner, runtime and service.

Each subcommand lives in its own module exposing `register(subparsers)`, which adds an argparse
sub-parser whose `handler` default is a function `(args) -> int` (the exit code). Adding a command
means adding a module and one entry in `COMMAND_MODULES`; nothing else here changes.

Exit codes shared by all commands: 0 success, 2 bad input (a message says what to change),
3 infeasible (e.g. a budget or capacity that is proven too small).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from arenaplan import __version__
from arenaplan.cli.common import EXIT_BAD_INPUT, report_user_error

COMMAND_MODULES = (
    "arenaplan.cli.inspect_cmd",
    "arenaplan.cli.layout_cmd",
    "arenaplan.cli.plan_cmd",
    "arenaplan.cli.min_budget_cmd",
    "arenaplan.cli.max_batch_cmd",
    "arenaplan.cli.demo_cmd",
    "arenaplan.cli.profile_cmd",
    "arenaplan.cli.export_cmd",
    "arenaplan.cli.run_cmd",
    "arenaplan.cli.serve_cmd",
    "arenaplan.cli.db_cmd",
    "arenaplan.cli.plan_id_cmd",
    "arenaplan.cli.fetch_cmd",
    "arenaplan.cli.report_cmd",
    "arenaplan.cli.validate_cmd",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="arenaplan",
        description="Plan the memory of an ONNX training graph: order, rematerialization, "
        "device placement and arena layout.",
    )
    parser.add_argument("--version", action="version", version=f"arenaplan {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "handler", None) is None:
        parser.print_help()
        return EXIT_BAD_INPUT
    try:
        return int(args.handler(args))
    except Exception as exc:  # noqa: BLE001 - typed user errors become messages, not tracebacks
        code = report_user_error(exc)
        if code is None:
            raise
        return code


if __name__ == "__main__":
    sys.exit(main())
