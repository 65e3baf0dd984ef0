"""Every error the API answers, as one JSON shape (`schemas.service.ApiError`).

Handlers turn `ApiProblem`, FastAPI's request validation errors and HTTP exceptions into that
shape. Anything else reaching the top is a bug: it is logged with its traceback and answered
with a 500 that hides the internals (no input is meant to get there; tests check that).
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from schemas.service import ApiError, ErrorCode

log = logging.getLogger("arenaplan.service")


class ApiProblem(Exception):
    """An error answer: HTTP status plus the ApiError body."""

    def __init__(self, status: int, error: ErrorCode, detail: str, headers: dict | None = None,
                 **fields: Any) -> None:
        super().__init__(detail)
        self.status = status
        self.body = ApiError(error=error, detail=detail, **fields)
        self.headers = headers


def error_response(status: int, body: ApiError, headers: dict | None = None) -> JSONResponse:
    return JSONResponse(body.model_dump(mode="json", exclude_none=True), status_code=status,
                        headers=headers)


def stored_error(error: dict) -> ApiError:
    """A failed job's stored error as an ApiError, tolerant of rows written by other versions."""
    fields = {k: v for k, v in error.items() if k in ApiError.model_fields}
    fields.setdefault("detail", "the job failed")
    try:
        return ApiError.model_validate(fields)
    except ValueError:
        return ApiError(error="planner_error", detail=str(fields.get("detail")),
                        plan_id=fields.get("plan_id") if isinstance(fields.get("plan_id"), str)
                        else None)


def failed_job_response(error: dict, status: int) -> JSONResponse:
    return error_response(status if 400 <= status < 500 else 409, stored_error(error))


_STATUS_ERRORS: dict[int, ErrorCode] = {
    401: "unauthorized", 404: "not_found", 413: "too_large", 415: "unsupported_media_type",
    429: "busy",
}


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiProblem)
    async def _problem(_request: Request, exc: ApiProblem) -> JSONResponse:
        return error_response(exc.status, exc.body, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        lines = [f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg')}"
                 for e in exc.errors()]
        return error_response(422, ApiError(
            error="invalid_request", detail="invalid parameters: " + "; ".join(lines),
            errors=lines,
        ))

    @app.exception_handler(StarletteHTTPException)
    async def _http(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _STATUS_ERRORS.get(exc.status_code, "bad_request")
        detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        if exc.status_code == 404 and detail == "Not Found":
            detail = "no such endpoint; see /docs for the API"
        if exc.status_code == 405:
            detail = f"{detail}; see /docs for the methods of each endpoint"
        return error_response(exc.status_code, ApiError(error=code, detail=detail),
                              getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def _bug(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return JSONResponse(
            {"detail": "internal error in the arenaplan service (logged); please report it",
             "error": "internal"},
            status_code=500,
        )
