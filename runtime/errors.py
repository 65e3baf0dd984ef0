"""Typed errors for everything that can stop a plan from running, each saying what to change.

All derive from `schemas.errors.ArenaplanError`, so the CLI turns them into one line on stderr and
exit code 2, and the service into a 4xx.
"""

from __future__ import annotations

from schemas.errors import ArenaplanError

__all__ = [
    "RuntimePlanError",
    "ModelMismatchError",
    "UnsupportedPlanVersionError",
    "ArenaBudgetError",
    "PlanCheckError",
    "DeviceUnavailableError",
    "ModelReadError",
    "InputValuesError",
    "PlanFetchError",
    "PlanNotReadyError",
    "PlanNotFoundError",
]


class RuntimePlanError(ArenaplanError):
    """The root of the runtime's errors: the plan, the model or the machine cannot run together."""


class ModelMismatchError(RuntimePlanError):
    """The plan was made for another model (its model_sha256 differs from the model's bytes)."""


class UnsupportedPlanVersionError(RuntimePlanError):
    """The plan's schema_version is not one this runtime knows how to execute."""


class ArenaBudgetError(RuntimePlanError):
    """An arena the plan asks for is larger than the budget the plan itself declares."""


class PlanCheckError(RuntimePlanError):
    """The plan fails the runtime's structural check (or an injected validator)."""

    def __init__(self, message: str, problems: list[str] | None = None):
        super().__init__(message)
        self.problems = list(problems or [])


class DeviceUnavailableError(RuntimePlanError):
    """The plan places work on a device this machine does not have (e.g. cuda:0 without a GPU)."""


class ModelReadError(RuntimePlanError):
    """The model file cannot be read or executed as the plan describes it."""


class InputValuesError(RuntimePlanError):
    """Input values (an .npz file or a dict) miss a graph input or have the wrong shape/dtype."""


class PlanFetchError(RuntimePlanError):
    """The plan server could not give the plan (unreachable, refused, failed to plan)."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class PlanNotReadyError(PlanFetchError):
    """The server is still solving this plan (HTTP 202): ask again later."""

    def __init__(self, message: str, status: int | None = 202,
                 retry_after: float | None = None):
        super().__init__(message, status)
        self.retry_after = retry_after


class PlanNotFoundError(PlanFetchError):
    """The server knows no plan with this id (HTTP 404)."""
