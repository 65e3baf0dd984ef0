"""Solving outside the event loop: a bounded pool of solver processes fed from the store.

`JobRunner` keeps `settings.workers` solver processes (`service.worker`), each driven by one
dispatcher thread that claims the oldest queued job from the store, hands it to its process and
waits for the answer while recording progress. A job is killed at its time limit
(`Settings.job_time_limit`); a process that dies mid-job (crash, out of memory, killed) marks
the job failed with the reason and is replaced. The store is the queue, so jobs outlive the
process: see `service.recovery` for what happens to them after a crash or restart.

Requests waiting for a job (`POST /plan?wait=`) are woken through `JobEvents` as soon as the
job finishes in this instance, and re-read the store at least every second (for jobs that
another instance finishes).
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess

from schemas.plan import PlanRequest
from service.blobs import DamagedBlobError, ModelBlobs
from service.metrics import ServiceMetrics
from service.plan_bodies import PlanBodies
from service.recovery import owner_is_gone, recover_jobs
from service.retention import ModelRetention
from service.settings import Settings
from service.store import Claim, Store
from service.worker import worker_main

log = logging.getLogger("arenaplan.service")

IDLE_POLL_S = 2.0  # how often an idle dispatcher looks for jobs queued by other instances
PROGRESS_MIN_INTERVAL_S = 0.5  # progress of one phase is written at most this often


def new_owner_id() -> str:
    """Who runs a job: host, process and a random part (a restarted process is a new owner)."""
    return f"{socket.gethostname()}/{os.getpid()}/{uuid.uuid4().hex[:8]}"


class JobEvents:
    """Wakes asyncio waiters from the dispatcher threads when a job reaches a final state."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: dict[str, set[tuple[asyncio.AbstractEventLoop, asyncio.Event]]] = {}

    @contextmanager
    def subscribe(self, plan_id: str) -> Iterator[asyncio.Event]:
        entry = (asyncio.get_running_loop(), asyncio.Event())
        with self._lock:
            self._waiters.setdefault(plan_id, set()).add(entry)
        try:
            yield entry[1]
        finally:
            with self._lock:
                waiters = self._waiters.get(plan_id)
                if waiters is not None:
                    waiters.discard(entry)
                    if not waiters:
                        del self._waiters[plan_id]

    def publish(self, plan_id: str) -> None:
        with self._lock:
            entries = list(self._waiters.get(plan_id, ()))
        for loop, event in entries:
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:  # the loop is closed: its request is gone
                pass

    def publish_all(self) -> None:
        with self._lock:
            plan_ids = list(self._waiters)
        for plan_id in plan_ids:
            self.publish(plan_id)


class WorkerStartError(RuntimeError):
    pass


class WorkerProcess:
    """One solver process and the pipe to it."""

    def __init__(self, index: int, start_timeout_s: float):
        self.index = index
        self.start_timeout_s = start_timeout_s
        self._ctx = multiprocessing.get_context("spawn")
        self.process: BaseProcess | None = None
        self.conn: Connection | None = None
        self.ready = False

    def start(self) -> None:
        parent_conn, child_conn = self._ctx.Pipe()
        process = self._ctx.Process(
            target=worker_main, args=(child_conn,), name=f"arenaplan-solver-{self.index}",
            daemon=True,
        )
        process.start()
        child_conn.close()
        self.process, self.conn = process, parent_conn
        if not parent_conn.poll(self.start_timeout_s):
            self.kill()
            raise WorkerStartError(f"solver process {self.index} did not start in "
                                   f"{self.start_timeout_s:.0f} s")
        try:
            message = parent_conn.recv()
        except (EOFError, OSError):
            code = self.exit_description()
            self.kill()
            raise WorkerStartError(f"solver process {self.index} died while starting "
                                   f"({code})") from None
        if message[0] != "ready":
            self.kill()
            raise WorkerStartError(f"solver process {self.index} said {message[0]!r}")
        self.ready = True

    @property
    def alive(self) -> bool:
        return self.ready and self.process is not None and self.process.is_alive()

    @property
    def pipe(self) -> Connection:
        """The connection to the solver process, which start() opened and kill() closes."""
        assert self.conn is not None, f"solver process {self.index} is not running"
        return self.conn

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def exit_description(self) -> str:
        if self.process is None:
            return "never started"
        self.process.join(timeout=2)
        code = self.process.exitcode
        if code is None:
            return "still running"
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            hint = " (the kernel's out-of-memory killer sends it)" if -code == 9 else ""
            return f"killed by {name}{hint}"
        return f"exit code {code}"

    def kill(self) -> None:
        self.ready = False
        if self.process is not None and self.process.is_alive():
            self.process.kill()
            self.process.join(timeout=5)
        if self.conn is not None:
            self.conn.close()
            self.conn = None


@dataclass
class Slot:
    """A dispatcher thread with its solver process and the job it is running."""

    worker: WorkerProcess
    thread: threading.Thread | None = None
    plan_id: str | None = None
    started: float = 0.0
    last_progress: dict = field(default_factory=dict)
    progress_written_at: float = 0.0


class JobRunner:
    def __init__(self, settings: Settings, store: Store, blobs: ModelBlobs,
                 metrics: ServiceMetrics, events: JobEvents, bodies: PlanBodies):
        self.settings, self.store, self.blobs, self.bodies = settings, store, blobs, bodies
        self.metrics, self.events = metrics, events
        self.owner = new_owner_id()
        self.slots = [Slot(WorkerProcess(i, settings.worker_start_timeout_s))
                      for i in range(settings.workers)]
        self._stopping = threading.Event()
        self._wake = threading.Condition()
        self._housekeeper: threading.Thread | None = None
        self.retention = ModelRetention(blobs, store, settings.model_retention_s)

    # --- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        self._recover()
        for slot in self.slots:
            slot.thread = threading.Thread(target=self._dispatch, args=(slot,),
                                           name=f"dispatch-{slot.worker.index}", daemon=True)
            slot.thread.start()
        self._housekeeper = threading.Thread(target=self._housekeep, name="housekeeping",
                                             daemon=True)
        self._housekeeper.start()

    def stop(self) -> None:
        """Graceful stop: running jobs go back to the queue (uncounted), processes end."""
        self._stopping.set()
        running = self.running_plan_ids()
        try:
            released = self.store.release_owned(self.owner, running)
            if released:
                log.info("re-queued %d running job(s) for the next start", released)
        except Exception:  # noqa: BLE001 - the lease expires and recovery re-queues them
            log.exception("could not re-queue running jobs at shutdown")
        self.wake()
        for slot in self.slots:
            slot.worker.kill()
        for slot in self.slots:
            if slot.thread is not None:
                slot.thread.join(timeout=10)
        self.events.publish_all()

    def wake(self) -> None:
        with self._wake:
            self._wake.notify_all()

    # --- views ------------------------------------------------------------------------------

    def running_plan_ids(self) -> list[str]:
        return [slot.plan_id for slot in self.slots if slot.plan_id is not None]

    def workers_alive(self) -> int:
        return sum(slot.worker.alive for slot in self.slots)

    def workers_busy(self) -> int:
        return sum(slot.plan_id is not None for slot in self.slots)

    # --- dispatching ------------------------------------------------------------------------

    def _dispatch(self, slot: Slot) -> None:
        backoff = 1.0
        while not self._stopping.is_set():
            try:
                if not slot.worker.alive:
                    slot.worker.kill()
                    slot.worker.start()
                    backoff = 1.0
                claim = self.store.claim_next(self.owner, self.settings.lease_s)
            except Exception:  # noqa: BLE001 - keep dispatching; the cause is logged
                log.exception("solver slot %d cannot take jobs; retrying in %.0f s",
                              slot.worker.index, backoff)
                self._stopping.wait(backoff)
                backoff = min(backoff * 2, 60.0)
                continue
            if claim is None:
                with self._wake:
                    self._wake.wait(IDLE_POLL_S)
                continue
            if self._stopping.is_set():  # claimed while stop() was releasing: give it back
                self.store.release_owned(self.owner, [claim.plan_id])
                return
            try:
                self._run(slot, claim)
            except Exception:  # noqa: BLE001 - a store failure mid-job: the lease recovers it
                log.exception("job %s: dispatcher error", claim.plan_id)
            finally:
                slot.plan_id = None

    def _run(self, slot: Slot, claim: Claim) -> None:
        slot.plan_id, slot.started, slot.last_progress = claim.plan_id, time.monotonic(), {}
        slot.progress_written_at = 0.0
        self.metrics.solves_started.inc()
        try:
            request = PlanRequest.model_validate_json(claim.request_json)
            limit = self.settings.job_time_limit(request.time_limit_s)
            model_path = str(self.blobs.path_for(claim.model_sha256))
        except Exception as exc:  # noqa: BLE001 - a row this version cannot read
            self._finish(slot, claim, error={
                "error": "planner_error", "status": 409, "retryable": True,
                "detail": f"the stored request cannot be read ({exc}); resubmit it"})
            return
        if self._model_damaged(slot, claim):
            return
        log.info("job %s: attempt %d, time limit %.0f s", claim.plan_id, claim.attempts, limit)
        worker = slot.worker
        try:
            worker.pipe.send(("job", claim.plan_id, model_path, claim.request_json))
        except (OSError, ValueError):
            self._crashed(slot, claim)
            return
        deadline = slot.started + limit
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                worker.kill()
                if limit < request.time_limit_s + self.settings.job_grace_s:
                    why = "the service's cap per job (ARENAPLAN_JOB_TIMEOUT_S)"
                else:
                    why = (f"time_limit_s {request.time_limit_s:g} + "
                           f"{self.settings.job_grace_s:g} s grace")
                self._finish(slot, claim, error={
                    "error": "timeout", "status": 409, "retryable": True,
                    "detail": f"the solve ran past the limit of {limit:g} s for this job "
                    f"({why}) in phase {slot.last_progress.get('phase', 'load')}; ask for a "
                    "smaller time_limit_s",
                })
                return
            try:
                message = worker.pipe.recv() if worker.pipe.poll(min(remaining, 0.5)) else None
            except (EOFError, OSError):
                self._crashed(slot, claim)
                return
            if message is None:
                continue
            kind = message[0]
            if kind == "progress":
                self._progress(slot, claim, message[1], message[2])
            elif kind == "done":
                error = self._keep_profile(claim, message[2])
                if error is not None:
                    self._finish(slot, claim, error=error)
                else:
                    self._finish(slot, claim, plan_json=message[1])
                return
            elif kind == "failed":
                if message[1].get("error") == "invalid_model" and self._model_damaged(slot, claim):
                    return  # damaged while the solver read it: not the user's model at fault
                self._finish(slot, claim, error=message[1])
                return

    def _keep_profile(self, claim: Claim, profile_json: str | None) -> dict | None:
        """Store the profile the solver measured for this plan before the plan itself, so that
        a done plan always has its costs beside it; the job's error when it cannot be stored.

        A job that another instance finished meanwhile (it re-ran this one after our lease
        expired) keeps that instance's profile: it is not overwritten, and its finish wins.
        """
        if profile_json is None:
            return None
        current = self.store.get(claim.plan_id, None)
        if current is not None and current.state == "done":
            return None  # store.finish will not record ours either
        try:
            self.bodies.write_profile(claim.plan_id, profile_json)
        except OSError as exc:
            log.exception("job %s: cannot store its measured profile", claim.plan_id)
            return {"error": "planner_error", "status": 409, "retryable": True,
                    "detail": f"the service cannot store the profile it measured for this plan "
                    f"({exc.strerror or exc}); resubmit to plan again, or send a profile"}
        return None

    def _model_damaged(self, slot: Slot, claim: Claim) -> bool:
        """Fail the job retryably when its stored model does not match its sha256 (True).

        Planning damaged bytes would blame the user's valid model with a final 422; this is the
        store's fault, and uploading the model again repairs it (`BlobWriter.commit`).
        """
        if not self.blobs.exists(claim.model_sha256) or self.blobs.is_intact(claim.model_sha256):
            return False
        log.error("job %s: stored model %s does not match its sha256", claim.plan_id,
                  claim.model_sha256)
        self._finish(slot, claim, error={
            "error": "stored_model_damaged", "status": 409, "retryable": True,
            "detail": str(DamagedBlobError(claim.model_sha256))})
        return True

    def _crashed(self, slot: Slot, claim: Claim) -> None:
        if self._stopping.is_set():
            return  # stop() killed it and re-queued the job
        reason = slot.worker.exit_description()
        slot.worker.kill()
        self._finish(slot, claim, error={
            "error": "worker_crashed", "status": 409, "retryable": True,
            "detail": f"the solver process died while planning ({reason}) in phase "
            f"{slot.last_progress.get('phase', 'load')}; resubmit to try again, with a "
            "smaller model or time limit if it happens again",
        })

    def _progress(self, slot: Slot, claim: Claim, phase: str, info: dict) -> None:
        now = time.monotonic()
        same_phase = slot.last_progress.get("phase") == phase
        best = slot.last_progress.get("best_objective") if same_phase else None
        bound = slot.last_progress.get("bound") if same_phase else None
        objective = _first_number(info, "best_objective", "objective")
        reported_bound = _first_number(info, "bound", "best_bound", "lower_bound")
        slot.last_progress = {
            "phase": phase, "info": info,
            "best_objective": best if objective is None else objective,
            "bound": bound if reported_bound is None else reported_bound,
        }
        if same_phase and now - slot.progress_written_at < PROGRESS_MIN_INTERVAL_S:
            return
        slot.progress_written_at = now
        self.store.set_progress(claim.plan_id, self.owner, slot.last_progress)

    def _finish(self, slot: Slot, claim: Claim, *, plan_json: str | None = None,
                error: dict | None = None) -> None:
        seconds = time.monotonic() - slot.started
        if error is not None:
            error = dict(error)
            status = int(error.pop("status", 409))
            retryable = bool(error.pop("retryable", True))
            error.setdefault("plan_id", claim.plan_id)
            outcome = str(error.get("error", "failed"))
            recorded = self.store.finish(claim.plan_id, self.owner, solve_seconds=seconds,
                                         error=error, error_status=status, retryable=retryable)
        else:
            outcome = "done"
            recorded = self.store.finish(claim.plan_id, self.owner, solve_seconds=seconds,
                                         plan_json=plan_json)
            if recorded and plan_json is not None:
                self._write_body(claim.plan_id, plan_json)
        if not recorded:
            log.warning("job %s: finished here but no longer owned (reclaimed elsewhere)",
                        claim.plan_id)
        log.info("job %s: %s after %.2f s", claim.plan_id, outcome, seconds)
        self.metrics.solves_finished.labels(outcome=outcome).inc()
        self.metrics.solve_seconds.labels(outcome=outcome).observe(seconds)
        self.events.publish(claim.plan_id)

    def _write_body(self, plan_id: str, plan_json: str) -> None:
        """Encode the plan for fetching once, now (`service.plan_bodies`); a fetch rebuilds it
        from the store when this fails."""
        try:
            self.bodies.write(plan_id, plan_json)
        except OSError:
            log.exception("job %s: cannot write the plan's files", plan_id)

    # --- heartbeat and recovery -------------------------------------------------------------

    def _housekeep(self) -> None:
        interval = max(0.2, self.settings.lease_s / 3)
        while not self._stopping.wait(interval):
            try:
                self.store.heartbeat(self.owner, self.running_plan_ids(), self.settings.lease_s)
                self._recover()
                self.retention.sweep_when_due()
            except Exception:  # noqa: BLE001 - keep beating; the cause is logged
                log.exception("housekeeping failed")

    def _recover(self) -> None:
        result = recover_jobs(self.store, self.settings,
                              lambda owner: owner_is_gone(owner, self.owner))
        if result.requeued:
            self.metrics.recovered.labels(action="requeued").inc(len(result.requeued))
        for plan_id in result.failed:
            self.metrics.recovered.labels(action="failed").inc()
            self.events.publish(plan_id)
        if result.requeued:
            self.wake()


def _first_number(info: dict, *keys: str) -> float | None:
    for key in keys:
        value = info.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    return None
