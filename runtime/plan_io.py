"""Reading a plan (file, bytes or parsed JSON) into `schemas.Plan`, version first.

The schema version is checked before the rest of the document, so a plan from another planner
release is refused as "unknown schema version" rather than as a pile of validation errors. The
runtime runs exactly the version it ships with: version 1 plans (before explicit storage, with
`alias_of`) describe memory differently and are refused too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from runtime.errors import PlanCheckError, UnsupportedPlanVersionError
from schemas.plan import PLAN_SCHEMA_VERSION, Plan


def check_schema_version(version: Any) -> None:
    if isinstance(version, bool) or version != PLAN_SCHEMA_VERSION:
        raise UnsupportedPlanVersionError(
            f"plan schema_version {version!r} is unknown to this runtime (it runs version "
            f"{PLAN_SCHEMA_VERSION} only); re-plan the model with this arenaplan (arenaplan "
            "plan), or run the plan with the arenaplan release that made it"
        )


def parse_plan(document: str | bytes | dict) -> Plan:
    """A Plan from JSON text or a parsed dict; typed errors for other versions and non-plans."""
    if isinstance(document, dict):
        data = document
    else:
        try:
            data = json.loads(document)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise PlanCheckError(f"the plan is not JSON: {exc}") from None
    if not isinstance(data, dict) or "steps" not in data or "buffers" not in data:
        raise PlanCheckError("this JSON is not an arenaplan plan (no steps/buffers)")
    check_schema_version(data.get("schema_version"))
    try:
        return Plan.model_validate(data)
    except ValidationError as exc:
        problems = [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()]
        raise PlanCheckError(
            f"the plan does not match the plan schema: {'; '.join(problems[:3])}", problems
        ) from None


def read_plan(path: str | Path) -> Plan:
    try:
        text = Path(path).read_bytes()
    except OSError as exc:
        raise PlanCheckError(f"cannot read plan {path}: {exc.strerror or exc}") from None
    return parse_plan(text)
