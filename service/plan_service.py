"""What the plan endpoints do, behind the thin routers: submit, wait, answer, list.

A submission is recorded in the store (job + who may see it) before anything is answered; the
plan id is deterministic (`schemas.plan.compute_plan_id`), so a repeat of the same model bytes
and request finds the stored plan and answers it without solving. A done plan is answered as
bytes encoded once (`service.plan_bodies`): its JSON, or its gzip copy when the client accepts
gzip, from memory when this namespace fetched it before.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import overload

from fastapi.responses import HTMLResponse, JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from planner.version import PLANNER_VERSION
from schemas.plan import canonical_request_json, compute_plan_id
from schemas.service import PlanList, PlanProgress, PlanStatus
from service.blobs import DamagedBlobError, ModelBlobs
from service.device_costs import check_costs_available
from service.errors import ApiProblem, failed_job_response, stored_error
from service.jobs import JobEvents, JobRunner
from service.metrics import ServiceMetrics
from service.plan_bodies import PlanBodies
from service.plan_profiles import profile_source, stored_profile_response
from service.report_view import render_stored_report
from service.settings import Settings
from service.store import JobView, QueueFullError, Store
from service.upload import PlanUpload

STORE_RECHECK_S = 1.0  # waiters re-read the store this often (jobs finished by other instances)


@overload
def _when(timestamp: float) -> datetime: ...


@overload
def _when(timestamp: None) -> None: ...


def _when(timestamp: float | None) -> datetime | None:
    return None if timestamp is None else datetime.fromtimestamp(timestamp, tz=timezone.utc)


class PlanService:
    def __init__(self, settings: Settings, store: Store, runner: JobRunner, events: JobEvents,
                 metrics: ServiceMetrics, bodies: PlanBodies):
        self.settings, self.store, self.runner = settings, store, runner
        self.events, self.metrics, self.bodies = events, metrics, bodies
        self.stopping = asyncio.Event()

    # --- POST /plan ------------------------------------------------------------------------

    async def submit(self, upload: PlanUpload, namespace: str | None, wait_s: float | None,
                     url_of: Callable[[str], str], accept_encoding: str | None) -> Response:
        check_costs_available(upload.request, self.settings.measure_devices)
        plan_id = compute_plan_id(upload.model_sha256, upload.request, PLANNER_VERSION)
        known = await run_in_threadpool(self.store.get, plan_id, namespace)
        if known is not None and (known.state == "done"
                                  or (known.state == "failed" and not known.retryable)):
            # Stored and visible to this caller: answered from the store, nothing written.
            self.metrics.submissions.labels(
                outcome="cached" if known.state == "done" else "existing").inc()
            return await self._answer(known, namespace, url_of(plan_id), accept_encoding)
        await run_in_threadpool(self.store.record_model, upload.model_sha256, upload.model_bytes)
        try:
            submitted = await run_in_threadpool(
                self.store.submit, plan_id, upload.model_sha256, PLANNER_VERSION,
                canonical_request_json(upload.request), namespace, self.settings.max_queued,
            )
        except QueueFullError as exc:
            raise ApiProblem(429, "busy", f"the service is full ({exc}); retry later",
                             headers={"Retry-After": "30"}) from None
        job = submitted.job
        outcome = submitted.outcome
        if outcome == "existing" and job.state == "done":
            outcome = "cached"
        self.metrics.submissions.labels(outcome=outcome).inc()
        if outcome in ("new", "requeued"):
            self.runner.wake()
        if not job.final:
            wait = self.settings.default_wait_s if wait_s is None else wait_s
            job = await self._wait_final(plan_id, min(wait, self.settings.max_wait_s), job)
        return await self._answer(job, namespace, url_of(plan_id), accept_encoding)

    async def _wait_final(self, plan_id: str, wait_s: float, job: JobView) -> JobView:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        with self.events.subscribe(plan_id) as finished:
            while True:
                latest = await run_in_threadpool(self.store.get, plan_id, None)
                job = latest or job
                remaining = deadline - loop.time()
                if job.final or remaining <= 0 or self.stopping.is_set():
                    return job
                try:
                    await asyncio.wait_for(finished.wait(), min(remaining, STORE_RECHECK_S))
                except asyncio.TimeoutError:
                    pass

    # --- GET /plans/{id} --------------------------------------------------------------------

    async def get(self, plan_id: str, namespace: str | None, url_of: Callable[[str], str],
                  accept_encoding: str | None) -> Response:
        body = self.bodies.recall(plan_id, namespace)
        if body is not None:  # shown to this namespace before: done plans never change
            return body.response(accept_encoding)
        job = await self._visible_job(plan_id, namespace)
        return await self._answer(job, namespace, url_of(plan_id), accept_encoding)

    async def status(self, plan_id: str, namespace: str | None,
                     url_of: Callable[[str], str]) -> PlanStatus:
        """Where a job stands, done and failed ones too: `solve_seconds` is the wall time of its
        last run (load, profile, every solver phase, validation), whatever the solvers' own
        reports in the plan add up to."""
        job = await self._visible_job(plan_id, namespace)
        status = self.status_of(job, url_of(plan_id))
        if job.state == "done":
            status.profile = await run_in_threadpool(
                profile_source, self.bodies, job, lambda: self.store.plan_json(plan_id))
        return status

    async def profile(self, plan_id: str, namespace: str | None) -> Response:
        """The profile the service measured for a done plan (`service.plan_profiles`)."""
        job = await self._visible_job(plan_id, namespace)
        return await run_in_threadpool(stored_profile_response, self.bodies, job,
                                       lambda: self.store.plan_json(plan_id))

    async def report(self, plan_id: str, namespace: str | None, url: str,
                     blobs: ModelBlobs) -> Response:
        """The plan's HTML report when it is done; otherwise the same answer as GET /plans/{id}.

        A damaged stored model is the store's fault: 409 saying that uploading it repairs it.
        """
        job = await self._visible_job(plan_id, namespace)
        if job.state != "done":
            return await self._answer(job, namespace, url, None)
        plan_json = await run_in_threadpool(self.store.plan_json, job.plan_id)
        assert plan_json is not None, "a done job has its plan"
        try:
            html = await run_in_threadpool(render_stored_report, plan_json, blobs,
                                           job.model_sha256)
        except DamagedBlobError as exc:
            raise ApiProblem(409, "stored_model_damaged", str(exc), plan_id=plan_id) from None
        return HTMLResponse(html)

    async def _visible_job(self, plan_id: str, namespace: str | None) -> JobView:
        job = await run_in_threadpool(self.store.get, plan_id, namespace)
        if job is None:
            raise ApiProblem(404, "not_found", f"no plan {plan_id} here; submit the model and "
                             "request with POST /plan (plan ids come from "
                             "`arenaplan plan-id`, or the answer to POST /plan)",
                             plan_id=plan_id)
        return job

    async def _answer(self, job: JobView, namespace: str | None, url: str,
                      accept_encoding: str | None) -> Response:
        if job.state == "done":
            plan_id = job.plan_id
            body = await run_in_threadpool(self.bodies.load, plan_id,
                                           lambda: self.store.plan_json(plan_id))
            assert body is not None, "a done job has its plan"
            self.bodies.remember(plan_id, namespace, body)
            return body.response(accept_encoding)
        if job.state == "failed":
            return failed_job_response(job.error or {}, job.error_status or 409)
        status = self.status_of(job, url)
        return JSONResponse(status.model_dump(mode="json"), status_code=202,
                            headers={"Location": url, "Retry-After": "1"})

    def status_of(self, job: JobView, url: str) -> PlanStatus:
        progress = None
        if job.state == "running" and job.started_at is not None:
            raw = job.progress or {"phase": "start", "info": {}}
            progress = PlanProgress(
                phase=str(raw.get("phase", "start")),
                best_objective=raw.get("best_objective"), bound=raw.get("bound"),
                elapsed_s=max(0.0, time.time() - job.started_at), info=raw.get("info") or {},
            )
        error = None
        if job.state == "failed" and job.error:
            error = stored_error(job.error)
        return PlanStatus(
            plan_id=job.plan_id, model_sha256=job.model_sha256,
            planner_version=job.planner_version, status=job.state, url=url,
            created_at=_when(job.created_at), started_at=_when(job.started_at),
            finished_at=_when(job.finished_at), attempts=job.attempts, progress=progress,
            solve_seconds=job.solve_seconds, note=job.note, error=error,
        )

    # --- GET /plans -------------------------------------------------------------------------

    async def list(self, namespace: str | None, model_sha256: str | None, limit: int,
                   url_of: Callable[[str], str]) -> PlanList:
        jobs = await run_in_threadpool(self.store.list, namespace, model_sha256, limit)
        return PlanList(plans=[self.status_of(job, url_of(job.plan_id)) for job in jobs])
