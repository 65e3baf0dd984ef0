"""Pieces every subcommand shares: exit codes and how user errors are reported."""

from __future__ import annotations

import sys

from schemas.errors import ArenaplanError, InfeasibleError

EXIT_OK = 0
EXIT_BAD_INPUT = 2
EXIT_INFEASIBLE = 3


def report_user_error(exc: BaseException) -> int | None:
    """Print a user-caused error as one clear line on stderr and return its exit code.

    Returns None for anything that is not a typed user error, so that real bugs keep their
    traceback instead of being disguised as bad input.
    """
    if isinstance(exc, InfeasibleError):
        print(f"arenaplan: infeasible: {exc}", file=sys.stderr)
        return EXIT_INFEASIBLE
    if isinstance(exc, ArenaplanError):
        print(f"arenaplan: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return None
