"""Build a PlanRequest from command-line options, with errors that name the bad option."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from pydantic import ValidationError

from schemas.errors import ArenaplanError
from schemas.plan import PlanRequest
from schemas.profile import Profile


def request_from_args(args: argparse.Namespace) -> PlanRequest:
    budgets: dict[str, int] = {}
    for device, size in args.budgets:
        if device in budgets:
            raise ArenaplanError(f"--budget for {device} is given twice")
        budgets[device] = size
    profile = _read_profile(args.profile) if args.profile else None
    try:
        return PlanRequest(
            budgets=budgets, dims=dict(args.dims), time_limit_s=args.time_limit,
            workers=args.workers, seed=args.seed, alignment=args.alignment, profile=profile,
            graph_optimization=args.graph_optimization,
        )
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        raise ArenaplanError(f"bad request: {problems}") from None


def _read_profile(path: str) -> Profile:
    try:
        return Profile.model_validate(json.loads(Path(path).read_text()))
    except FileNotFoundError:
        raise ArenaplanError(f"profile file not found: {path}") from None
    except (json.JSONDecodeError, ValidationError) as exc:
        first = str(exc).splitlines()[0]
        raise ArenaplanError(f"{path} is not an arenaplan profile: {first}") from None
