"""The FastAPI application: `create_app(settings)` wires store, model store, solver pool, routes.

Run it with `arenaplan serve` (service.serve) or any ASGI server:
`uvicorn --factory service.app:create_app` reads its settings from the environment.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from planner.version import PLANNER_VERSION
from service.blobs import ModelBlobs
from service.errors import install_error_handlers
from service.jobs import JobEvents, JobRunner
from service.metrics import RequestMetricsMiddleware, ScrapedGauge, ServiceMetrics
from service.openapi import install_openapi
from service.plan_bodies import PLANS_FOLDER, PlanBodies
from service.plan_service import PlanService
from service.routes import ops, plans
from service.settings import Settings, load_settings
from service.store import Store

log = logging.getLogger("arenaplan.service")

DESCRIPTION = """\
ONNX training graph in, memory plan out.

`POST /plan` with a multipart body: `model` (the ONNX training graph) and `request` (a
`PlanRequest` JSON: budgets per device, dims, time limit...). The answer is the `Plan` when it
is ready within `?wait=` seconds, else 202 with the plan id and its URL; `GET /plans/{id}` then
answers 200 (plan), 202 (solving, with progress), 404, or 409/422 (failed, with the reason).
`GET /plans/{id}/status` tells where a job stands in any state, with the wall time of its solve.
Plan ids are deterministic: `arenaplan plan-id MODEL.onnx --budget ...` computes them offline.

With API keys configured, send `Authorization: Bearer <key>`; each key sees its own plans.
"""


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or load_settings()
    metrics = ServiceMetrics()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        store = Store(settings.db)
        blobs = ModelBlobs(settings.model_dir)
        blobs.remove_stale_uploads()
        events = JobEvents()
        bodies = PlanBodies(settings.model_dir / PLANS_FOLDER, settings.plan_cache_bytes)
        runner = JobRunner(settings, store, blobs, metrics, events, bodies)
        runner.start()
        gauges = [
            ScrapedGauge("arenaplan_jobs", "plan jobs in the store by state", "state",
                         store.counts_by_state),
            ScrapedGauge("arenaplan_solver_processes", "solver processes by state", "state",
                         lambda: {"alive": runner.workers_alive(), "busy": runner.workers_busy()}),
        ]
        for gauge in gauges:
            metrics.registry.register(gauge)
        service = PlanService(settings, store, runner, events, metrics, bodies)
        app.state.settings, app.state.store, app.state.blobs = settings, store, blobs
        app.state.runner, app.state.plans, app.state.metrics = runner, service, metrics
        log.info("arenaplan service: store %s, models in %s, %d solver process(es), %s",
                 redact_url(settings.db), settings.model_dir, settings.workers,
                 "API keys required" if settings.auth_enabled else "no API keys")
        try:
            yield
        finally:
            service.stopping.set()
            for gauge in gauges:
                metrics.registry.unregister(gauge)
            runner.stop()
            store.close()

    app = FastAPI(
        title="arenaplan", version=PLANNER_VERSION, description=DESCRIPTION,
        lifespan=lifespan, separate_input_output_schemas=False,
    )
    app.state.settings = settings
    install_error_handlers(app)
    app.include_router(plans.router)
    app.include_router(ops.router)
    app.add_middleware(RequestMetricsMiddleware, metrics=metrics)
    install_openapi(app)
    return app


def redact_url(url: str) -> str:
    """A database URL without its password, for logs."""
    scheme, sep, rest = url.partition("://")
    if "@" in rest and ":" in rest.split("@", 1)[0]:
        user = rest.split("@", 1)[0].split(":", 1)[0]
        return f"{scheme}{sep}{user}:***@{rest.split('@', 1)[1]}"
    return url
