"""Jobs survive the service: killed mid-solve, restarted on the same store, nothing is lost.

Real processes throughout: the server is SIGKILLed while a solver runs (a crash, no chance to
clean up), its solver processes notice and exit, and a new server on the same store (a SQLite
file, a PostgreSQL database) re-runs the interrupted job and the queued one. A job interrupted
more often than the service retries is marked failed with the reason, and a solver process
that dies or runs past its time limit fails its job without taking the service down.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from schemas.service import ApiError, PlanList
from tests.support.fixture_zoo import model_path
from tests.support.service import (
    ServiceProcess,
    get,
    request_json,
    submit,
    wait_for,
)

# A job that surely runs a while: resnet18_narrow at about 70% of its keep-everything peak
# needs rematerialization, whose solver uses its whole time limit. (At a generous budget the
# planner may finish within a few seconds, before a test sees the job running.)
LONG_JOB = {"budget": 3_000_000, "time_limit_s": 10}
OVERDUE_BUDGET = 3_300_000


def _running(url: str, plan_id: str, timeout: float = 30) -> None:
    """Wait until a solver process has the job and has reported a phase."""
    wait_for(url, plan_id, until=(202,), timeout=timeout,
             predicate=lambda r: r.json()["status"] == "running"
             and (r.json().get("progress") or {}).get("phase") not in (None, "start"))


def _listing(url: str) -> dict:
    return {p.plan_id: p for p in PlanList.model_validate_json(get(url, "/plans").text).plans}


def _gone(pids: list[int], timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(os.path.exists(f"/proc/{pid}") and _alive(pid) for pid in pids):
            return True
        time.sleep(0.1)
    return False


def _alive(pid: int) -> bool:
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.slow  # 15-35 s: `make test` stays under 10 min on 2 cores
def test_a_killed_server_reruns_its_jobs_after_restart(tmp_path, database_url):
    service = ServiceProcess(tmp_path, workers=1, args=("--db", database_url))
    service.start()
    try:
        slow = submit(service.url, model_path("resnet18_narrow"),
                      request_json(**LONG_JOB, seed=1), wait=0)
        queued = submit(service.url, model_path("mlp_sgd"), request_json(time_limit_s=1),
                        wait=0)
        assert slow.status_code == 202 and queued.status_code == 202
        slow_id, queued_id = slow.json()["plan_id"], queued.json()["plan_id"]
        _running(service.url, slow_id)
        assert get(service.url, f"/plans/{queued_id}").json()["status"] == "queued"
        solvers = service.worker_pids()
        assert solvers, "the solver process should be a child of the server"

        service.kill_hard()
        assert _gone(solvers), "solver processes must exit when their server dies"

        service.start()
        done = wait_for(service.url, slow_id, timeout=60)
        assert done.status_code == 200, done.text[:300]
        assert wait_for(service.url, queued_id, timeout=30).status_code == 200
        jobs = _listing(service.url)
        assert jobs[slow_id].attempts == 2
        assert "its service instance stopped" in jobs[slow_id].note
        assert jobs[queued_id].attempts == 1
    finally:
        service.stop()


@pytest.mark.slow
def test_a_job_interrupted_too_often_fails_with_the_reason(tmp_path, database_url):
    service = ServiceProcess(tmp_path, workers=1, env={"ARENAPLAN_MAX_ATTEMPTS": "1"},
                             args=("--db", database_url))
    service.start()
    try:
        request = request_json(**LONG_JOB, seed=2)
        accepted = submit(service.url, model_path("resnet18_narrow"), request, wait=0)
        plan_id = accepted.json()["plan_id"]
        _running(service.url, plan_id)
        service.kill_hard()
        service.start()
        failed = wait_for(service.url, plan_id, until=(409,), timeout=20)
        error = ApiError.model_validate_json(failed.text)
        assert error.error == "interrupted" and "resubmit" in error.detail
        again = submit(service.url, model_path("resnet18_narrow"), request, wait=0)
        assert again.status_code == 202 and again.json()["status"] in ("queued", "running")
        # A graceful stop puts the running job back without counting the attempt.
        _running(service.url, plan_id)
        service.stop()
        service.start()
        assert _listing(service.url)[plan_id].status in ("queued", "running")
        assert wait_for(service.url, plan_id, timeout=60).status_code == 200
        assert _listing(service.url)[plan_id].attempts == 1
    finally:
        service.stop()


def test_a_dead_or_overdue_solver_fails_its_job_and_the_service_goes_on(tmp_path):
    service = ServiceProcess(tmp_path, workers=1, env={"ARENAPLAN_JOB_TIMEOUT_S": "4"})
    service.start()
    try:
        crash = submit(service.url, model_path("resnet18_narrow"),
                       request_json(LONG_JOB["budget"], time_limit_s=3, seed=3), wait=0)
        crash_id = crash.json()["plan_id"]
        _running(service.url, crash_id)
        (solver,) = service.worker_pids()
        os.kill(solver, signal.SIGKILL)
        failed = ApiError.model_validate_json(
            wait_for(service.url, crash_id, until=(409,), timeout=20).text)
        assert failed.error == "worker_crashed" and "SIGKILL" in failed.detail

        # a budget below any plan the planner meets (about half of resnet_cifar's peak): the
        # solver searches for its 30 s, the job limit is 4 s
        overdue = submit(service.url, model_path("resnet_cifar"),
                         request_json(OVERDUE_BUDGET, time_limit_s=30, seed=4), wait=30)
        error = ApiError.model_validate_json(overdue.text)
        assert overdue.status_code == 409 and error.error == "timeout", overdue.text[:300]
        assert "limit of 4 s" in error.detail

        fine = submit(service.url, model_path("mlp_sgd"), request_json(time_limit_s=1),
                      wait=60)
        assert fine.status_code == 200, fine.text[:300]
        retried = submit(service.url, model_path("resnet18_narrow"),
                         request_json(LONG_JOB["budget"], time_limit_s=3, seed=3), wait=0)
        assert retried.json()["plan_id"] == crash_id and retried.status_code == 202
    finally:
        service.stop()
