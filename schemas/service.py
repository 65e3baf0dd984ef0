"""What the planning service answers besides a plan: job status, plan listings and errors.

`GET /plans/{id}` answers 200 with a `Plan` when it is done, 202 with a `PlanStatus` while it is
queued or solving, 404 with an `ApiError` when the id is unknown (or belongs to another API key),
and 422/409 with an `ApiError` when the job failed: 422 when the input is invalid (model or
request), 409 when the input was understood but no plan came out (infeasible budget, time limit,
a crashed or interrupted solver). An infeasible budget carries the smallest feasible one.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

JobState = Literal["queued", "running", "done", "failed"]
# Where a done plan's per-op costs came from: the request's profile, one the service measured
# (GET /plans/{id}/profile serves it), or none (keeping every value fit the budget).
ProfileSource = Literal["supplied", "measured", "none"]

ErrorCode = Literal[
    "bad_request",  # malformed HTTP input: not multipart, missing or duplicate fields
    "invalid_request",  # the PlanRequest JSON does not validate, or a server limit refuses it
    "invalid_model",  # the ONNX model cannot be planned (parse, checker, unknown dims...)
    "infeasible",  # the budget is too small: see smallest_feasible_bytes
    "timeout",  # the solve ran past the service's per-job time limit, or an upload stalled
    "worker_crashed",  # the solver process died (e.g. killed for memory)
    "interrupted",  # the service stopped while the job ran, more often than it retries
    "planner_error",  # an internal planner failure; resubmitting tries again
    "stored_model_damaged",  # the service's copy of the model is damaged: upload it again
    "too_large",  # upload over the size limit
    "unauthorized",  # missing or unknown API key
    "not_found",  # no such plan (or not visible to this key)
    "busy",  # too many queued jobs: retry later
    "unsupported_media_type",
]


class ApiError(BaseModel):
    """Every 4xx answer: `detail` says what went wrong and what to change."""

    model_config = ConfigDict(extra="forbid")

    detail: str = Field(description="what went wrong and what to change")
    error: ErrorCode = Field(description="machine-readable kind of error")
    plan_id: str | None = Field(default=None, description="the plan the error belongs to")
    smallest_feasible_bytes: int | None = Field(
        default=None, description="infeasible budgets: the smallest budget known to work"
    )
    is_lower_bound: bool | None = Field(
        default=None,
        description="infeasible budgets: smallest_feasible_bytes is a proven lower bound, not a "
        "budget known to work",
    )
    errors: list[str] = Field(
        default_factory=list, description="one line per invalid field of the request"
    )


class PlanProgress(BaseModel):
    """How far the solver got: the phase it is in and the best values it reported."""

    model_config = ConfigDict(extra="forbid")

    phase: str = Field(description="planner phase: load, order, layout, validate, ...")
    best_objective: float | None = Field(
        default=None, description="best objective reported so far"
    )
    bound: float | None = Field(default=None, description="best bound reported so far")
    elapsed_s: float = Field(ge=0, description="seconds since this attempt started")
    info: dict[str, float | int | str | bool | None] = Field(
        default_factory=dict, description="what the phase reported, verbatim"
    )


class PlanStatus(BaseModel):
    """A plan job: where it stands. The 202 answer, and one row of a listing."""

    model_config = ConfigDict(extra="forbid")

    plan_id: str
    model_sha256: str
    planner_version: str
    status: JobState
    url: str = Field(description="GET it for the plan")
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    attempts: int = Field(ge=0, description="solver runs started (re-runs after restarts count)")
    progress: PlanProgress | None = None
    solve_seconds: float | None = Field(default=None, description="wall time of the solve")
    note: str | None = Field(default=None, description="e.g. re-queued after a restart")
    error: ApiError | None = Field(default=None, description="why it failed (status failed)")
    profile: ProfileSource | None = Field(
        default=None, description="where the plan's per-op costs came from, once it is done "
        "(GET /plans/{id}/status; null while solving and in listings): 'supplied' in the "
        "request, 'measured' by the service (GET /plans/{id}/profile serves that profile), "
        "or 'none' needed (keeping every value fits the budget)",
    )


class PlanList(BaseModel):
    """`GET /plans`: plans visible to the caller, newest first."""

    model_config = ConfigDict(extra="forbid")

    plans: list[PlanStatus]
