"""The OpenAPI document as the service really answers, where FastAPI's generator cannot see it.

- Every 422 is an `ApiError` (`service.errors` turns request validation errors into one), not
  FastAPI's `HTTPValidationError`, which the service never sends.
- The budgets' keys are device names (`schemas.plan.DEVICE_PATTERN`, the whole name):
  `propertyNames` says so, so clients and generated tests know which keys are accepted; budgets
  and dims are positive (their validators say so, the generated schema does not).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI

from schemas.plan import DEVICE_PATTERN

API_ERROR_REF = "#/components/schemas/ApiError"
FASTAPI_ERROR_SCHEMAS = ("HTTPValidationError", "ValidationError")
INVALID_PARAMETERS = "invalid parameters: `errors` has one line per invalid field"


def install_openapi(app: FastAPI) -> None:
    """Make `app.openapi()` return FastAPI's document with the corrections above."""
    generate: Callable[[], dict[str, Any]] = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = generate()
            _validation_errors_are_api_errors(document)
            _budget_keys_are_devices(document)
            app.openapi_schema = document
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented override


def _validation_errors_are_api_errors(document: dict[str, Any]) -> None:
    for operations in document.get("paths", {}).values():
        for operation in operations.values():
            answer = operation.get("responses", {}).get("422")
            if answer is None:
                continue
            schema = answer.get("content", {}).get("application/json", {}).get("schema", {})
            if schema.get("$ref", "").endswith("/HTTPValidationError"):
                answer["description"] = INVALID_PARAMETERS
                answer["content"] = {"application/json": {"schema": {"$ref": API_ERROR_REF}}}
    schemas = document.get("components", {}).get("schemas", {})
    for name in FASTAPI_ERROR_SCHEMAS:
        schemas.pop(name, None)


def _budget_keys_are_devices(document: dict[str, Any]) -> None:
    request = document["components"]["schemas"]["PlanRequest"]["properties"]
    request["budgets"]["propertyNames"] = {"pattern": f"^(?:{DEVICE_PATTERN.pattern})$"}
    for name in ("budgets", "dims"):
        request[name]["additionalProperties"]["minimum"] = 1
