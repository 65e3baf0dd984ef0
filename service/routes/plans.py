"""`POST /plan`, `GET /plans/{id}` (and its status, report, profile), `GET /plans`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import Response

from schemas.plan import Plan
from schemas.profile import Profile
from schemas.service import ApiError, PlanList, PlanStatus
from service.auth import NamespaceDep, SettingsDep
from service.errors import ApiProblem
from service.routes.deps import BlobsDep, PlansDep
from service.upload import read_plan_upload

router = APIRouter(tags=["plans"])

ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ApiError, "description": "missing or unknown API key"},
    404: {"model": ApiError, "description": "no such plan visible to this key"},
}
FAILED: dict[int | str, dict[str, Any]] = {
    409: {"model": ApiError,
          "description": "no plan: infeasible budget (with smallest_feasible_bytes), time "
          "limit, solver crash or interruption"},
    422: {"model": ApiError, "description": "invalid model or request: the detail says what "
          "to change"},
}
MULTIPART_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["model", "request"],
                    "properties": {
                        "model": {"type": "string", "format": "binary",
                                  "description": "the ONNX training graph"},
                        "request": {"$ref": "#/components/schemas/PlanRequest"},
                    },
                },
                "encoding": {"request": {"contentType": "application/json"}},
            }
        },
    }
}


# Documented, not enforced by FastAPI: an id of another shape is a 404 saying what ids look like
# (`_check_plan_id`), not a 422.
PLAN_ID_SCHEMA = {"pattern": "^[0-9a-f]{32}$"}


def _check_plan_id(plan_id: str) -> None:
    if not plan_id.isascii() or len(plan_id) != 32 or not all(
            c in "0123456789abcdef" for c in plan_id):
        raise ApiProblem(404, "not_found", f"{plan_id[:80]!r} is not a plan id: plan ids are "
                         "32 lowercase hex digits")


def _url_of(request: Request) -> Callable[[str], str]:
    return lambda plan_id: str(request.url_for("get_plan", plan_id=plan_id))


@router.post(
    "/plan",
    summary="Plan a training step: upload the model and the request",
    response_class=Response,
    responses={
        200: {"model": Plan, "description": "the plan (ready within `wait`, or stored)"},
        202: {"model": PlanStatus, "description": "accepted, still solving: GET its url"},
        400: {"model": ApiError, "description": "malformed multipart body"},
        401: ERRORS[401],
        408: {"model": ApiError, "description": "the upload stalled (no bytes for "
              "ARENAPLAN_BODY_READ_TIMEOUT_S)"},
        413: {"model": ApiError, "description": "upload over the size limit"},
        415: {"model": ApiError, "description": "not multipart/form-data"},
        429: {"model": ApiError, "description": "too many queued jobs"},
        **FAILED,
    },
    openapi_extra=MULTIPART_BODY,
)
async def submit_plan(
    request: Request,
    namespace: NamespaceDep,
    settings: SettingsDep,
    blobs: BlobsDep,
    plans: PlansDep,
    wait: Annotated[float | None, Query(
        ge=0, description="seconds to wait for the plan before answering 202 "
        "(default 30, capped by the server)")] = None,
) -> Response:
    upload = await read_plan_upload(request, settings, blobs)
    return await plans.submit(upload, namespace, wait, _url_of(request),
                              request.headers.get("accept-encoding"))


def _while_solving(done: dict[str, Any]) -> dict[int | str, dict[str, Any]]:
    """The answers of a GET on one plan: `done` (200), still solving (202), or an error."""
    return {200: done,
            202: {"model": PlanStatus, "description": "queued or solving, with progress"},
            **ERRORS, **FAILED}


@router.get(
    "/plans/{plan_id}",
    name="get_plan",
    summary="A plan by id: 200 done, 202 solving, 404 unknown, 409/422 failed",
    response_class=Response,
    responses=_while_solving({"model": Plan, "description": "the plan"}),
)
async def get_plan(
    request: Request,
    plan_id: Annotated[str, Path(
        description="32 hex digits (`arenaplan plan-id` computes it)",
        json_schema_extra=PLAN_ID_SCHEMA)],
    namespace: NamespaceDep,
    plans: PlansDep,
) -> Response:
    _check_plan_id(plan_id)
    return await plans.get(plan_id, namespace, _url_of(request),
                           request.headers.get("accept-encoding"))


@router.get(
    "/plans/{plan_id}/status",
    summary="A plan job's status in any state: times (solve_seconds: the job's wall time), "
    "attempts, progress, error",
    response_model=PlanStatus,
    responses=ERRORS,
)
async def get_plan_status(
    request: Request,
    plan_id: Annotated[str, Path(description="32 hex digits", json_schema_extra=PLAN_ID_SCHEMA)],
    namespace: NamespaceDep,
    plans: PlansDep,
) -> PlanStatus:
    _check_plan_id(plan_id)
    return await plans.status(plan_id, namespace, _url_of(request))


@router.get(
    "/plans/{plan_id}/profile",
    summary="The profile a plan was made with when the service measured it (the request had "
    "none): plan again with it, or send it, to pin those costs",
    response_class=Response,
    responses={
        200: {"model": Profile, "description": "the measured profile"},
        401: ERRORS[401],
        404: {"model": ApiError, "description": "no such plan visible to this key, not done, "
              "or no measured profile: the request carried its own, or none was needed (the "
              "detail says which)"},
    },
)
async def get_plan_profile(
    plan_id: Annotated[str, Path(description="32 hex digits", json_schema_extra=PLAN_ID_SCHEMA)],
    namespace: NamespaceDep,
    plans: PlansDep,
) -> Response:
    _check_plan_id(plan_id)
    return await plans.profile(plan_id, namespace)


@router.get(
    "/plans/{plan_id}/report",
    summary="The plan as a self-contained HTML report (memory curves, matrices, arena map)",
    response_class=Response,
    responses=_while_solving({"content": {"text/html": {}}, "description": "the report page"}),
)
async def get_plan_report(
    request: Request,
    plan_id: Annotated[str, Path(description="32 hex digits", json_schema_extra=PLAN_ID_SCHEMA)],
    namespace: NamespaceDep,
    plans: PlansDep,
    blobs: BlobsDep,
) -> Response:
    _check_plan_id(plan_id)
    return await plans.report(plan_id, namespace,
                              str(request.url_for("get_plan", plan_id=plan_id)), blobs)


@router.get(
    "/plans",
    summary="Plans visible to the caller, newest first, optionally of one model",
    response_model=PlanList,
    responses=ERRORS,
)
async def list_plans(
    request: Request,
    namespace: NamespaceDep,
    plans: PlansDep,
    model_sha256: Annotated[str | None, Query(
        pattern=r"^[0-9a-f]{64}$", description="sha256 of the model bytes (hex)")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> PlanList:
    return await plans.list(namespace, model_sha256, limit, _url_of(request))
