"""Operations: `GET /healthz` (alive), `GET /readyz` (store + a solver up), `GET /metrics`."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response

from schemas.service import ApiError
from service.auth import require_namespace
from service.metrics import TEXT_FORMAT
from service.routes.deps import MetricsDep, StoreDep

router = APIRouter(tags=["operations"])


@router.get("/healthz", summary="Liveness: the process answers (no key needed)")
async def healthz() -> dict:
    return {"status": "ok"}


@router.get("/readyz", summary="Readiness: the store answers and a solver process is up",
            responses={503: {"description": "not ready yet (or any more)"}})
def readyz(request: Request, store: StoreDep) -> JSONResponse:
    runner = request.app.state.runner
    problems = []
    try:
        store.ping()
    except Exception as exc:  # noqa: BLE001 - reported, not raised: this is the probe
        problems.append(f"store unreachable: {type(exc).__name__}")
    alive = runner.workers_alive()
    if alive == 0:
        problems.append("no solver process is up yet")
    body = {"status": "ready" if not problems else "not ready", "workers_alive": alive,
            "workers": len(runner.slots), "problems": problems}
    return JSONResponse(body, status_code=200 if not problems else 503)


@router.get("/metrics", summary="Prometheus metrics (text format; any API key may read them)",
            response_class=Response, dependencies=[Depends(require_namespace)],
            responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}},
                             "description": "the metrics in Prometheus' text format"},
                       401: {"model": ApiError, "description": "missing or unknown API key"}})
def metrics(metrics: MetricsDep) -> Response:
    return Response(metrics.render(), media_type=TEXT_FORMAT)
