"""Two `arenaplan serve` instances on one PostgreSQL store and one model folder: one is
SIGKILLed in the middle of a job, and the other finishes it and everything the dead one had
accepted. Nothing is lost: every job ends with its plan, the interrupted one counted twice.

The survivor notices the dead owner (a dead process on this host) within its recovery period,
`ARENAPLAN_LEASE_S / 3`; an instance on another host would wait for the lease to run out.
"""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, text

from schemas.plan import Plan
from schemas.service import PlanList
from tests.support.fixture_zoo import model_path
from tests.support.service import ServiceProcess, get, request_json, submit, wait_for

# resnet18_narrow at about 70% of its keep-everything peak: remat uses its whole time limit,
# so the job is surely still running when its instance is killed.
LONG_JOB = {"budget": 3_000_000, "time_limit_s": 6}


def _owner_pid(database_url: str, plan_id: str) -> int:
    """The process id in the job's owner (host/pid/nonce), read from the store itself."""
    engine = create_engine(database_url)
    try:
        with engine.connect() as connection:
            owner = connection.execute(text("SELECT owner FROM plan_jobs WHERE plan_id = :id"),
                                       {"id": plan_id}).scalar_one()
    finally:
        engine.dispose()
    return int(owner.split("/")[1])


@pytest.mark.slow  # 15-35 s: `make test` stays under 10 min on 2 cores
def test_a_job_of_a_killed_instance_is_finished_by_the_other(tmp_path, postgres_url):
    shared = {"ARENAPLAN_MODEL_DIR": str(tmp_path / "models"), "ARENAPLAN_LEASE_S": "3"}
    instances = [ServiceProcess(tmp_path / name, workers=1, env=shared,
                                args=("--db", postgres_url)) for name in ("one", "two")]
    try:
        for instance in instances:
            instance.start()
        slow = submit(instances[0].url, model_path("resnet18_narrow"),
                      request_json(**LONG_JOB, seed=11), wait=0)
        assert slow.status_code == 202, slow.text[:300]
        slow_id = slow.json()["plan_id"]
        wait_for(instances[0].url, slow_id, until=(202,), timeout=30,
                 predicate=lambda r: r.json()["status"] == "running"
                 and (r.json().get("progress") or {}).get("phase") not in (None, "start"))
        owner = _owner_pid(postgres_url, slow_id)
        (doomed,) = [i for i in instances if i.process.pid == owner]
        (survivor,) = [i for i in instances if i is not doomed]
        # The doomed instance also accepts a job just before it dies (the other solves it).
        late = submit(doomed.url, model_path("mlp_sgd"), request_json(time_limit_s=1), wait=0)
        assert late.status_code in (200, 202), late.text[:300]

        doomed.kill_hard()

        finished = wait_for(survivor.url, slow_id, timeout=90)
        assert finished.status_code == 200, finished.text[:300]
        assert Plan.model_validate_json(finished.text).plan_id == slow_id
        assert wait_for(survivor.url, late.json()["plan_id"], timeout=60).status_code == 200
        jobs = {p.plan_id: p for p in
                PlanList.model_validate_json(get(survivor.url, "/plans").text).plans}
        assert {job.status for job in jobs.values()} == {"done"}
        assert jobs[slow_id].attempts == 2
        assert "its service instance stopped" in jobs[slow_id].note
        assert _owner_pid(postgres_url, slow_id) == survivor.process.pid
    finally:
        for instance in instances:
            instance.stop()
