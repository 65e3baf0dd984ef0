"""The service's store on real databases, a SQLite file and PostgreSQL (a private cluster, see
`conftest.py`): the job state machine, visibility, concurrent claims, recovery.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from sqlalchemy import create_engine, text

from service.blobs import ModelBlobs
from service.recovery import owner_is_gone
from service.store import QueueFullError, Store

SHA = "ab" * 32


@pytest.fixture
def store(database_url):
    store = Store(database_url)
    yield store
    store.close()


def _submit(store: Store, plan_id: str, namespace: str | None = None, max_queued: int = 100):
    return store.submit(plan_id, SHA, "test", '{"budgets": {"cpu": 1}}', namespace, max_queued)


def test_job_lifecycle_and_repeat_submissions(store):
    first = _submit(store, "a" * 32)
    assert first.outcome == "new" and first.job.state == "queued"
    assert _submit(store, "a" * 32).outcome == "existing"
    claim = store.claim_next("me", lease_s=30)
    assert claim.plan_id == "a" * 32 and claim.attempts == 1
    assert store.claim_next("me", lease_s=30) is None
    store.set_progress(claim.plan_id, "me", {"phase": "order", "info": {"ops": 3}})
    assert store.get(claim.plan_id, None).progress["phase"] == "order"
    assert not store.finish(claim.plan_id, "someone-else", solve_seconds=1, plan_json="{}")
    assert store.finish(claim.plan_id, "me", solve_seconds=1.5, plan_json='{"plan": 1}')
    job = store.get(claim.plan_id, None)
    assert job.state == "done" and job.solve_seconds == 1.5 and job.final
    assert store.plan_json(claim.plan_id) == '{"plan": 1}'
    assert store.counts_by_state() == {"queued": 0, "running": 0, "done": 1, "failed": 0}


def test_failed_jobs_requeue_only_when_retrying_can_help(store):
    for plan_id, retryable in (("b" * 32, False), ("c" * 32, True)):
        _submit(store, plan_id)
        claim = store.claim_next("me", 30)
        store.finish(claim.plan_id, "me", solve_seconds=0.1, error={"error": "x", "detail": "y"},
                     error_status=409, retryable=retryable)
    assert _submit(store, "b" * 32).outcome == "existing"
    again = _submit(store, "c" * 32)
    assert again.outcome == "requeued" and again.job.state == "queued"
    assert again.job.error is None and again.job.attempts == 0


def test_namespaces_see_only_their_plans(store):
    _submit(store, "d" * 32, namespace="alice")
    assert store.get("d" * 32, "alice") is not None
    assert store.get("d" * 32, "bob") is None
    assert store.get("d" * 32, None) is not None  # no keys configured: one shared namespace
    assert [j.plan_id for j in store.list("alice", SHA, 10)] == ["d" * 32]
    assert store.list("bob", None, 10) == []
    _submit(store, "d" * 32, namespace="bob")
    assert store.get("d" * 32, "bob") is not None
    assert store.list("alice", "0" * 64, 10) == []


def test_queue_limit(store):
    _submit(store, "e" * 32, max_queued=1)
    with pytest.raises(QueueFullError):
        _submit(store, "f" * 32, max_queued=1)
    assert _submit(store, "e" * 32, max_queued=1).outcome == "existing"


def test_only_one_instance_claims_a_job(store):
    for i in range(6):
        _submit(store, f"{i:032x}")
    other = Store(store.database_url)
    claims: list = []
    lock = threading.Lock()

    def drain(s: Store, owner: str) -> None:
        while (claim := s.claim_next(owner, 30)) is not None:
            with lock:
                claims.append(claim.plan_id)

    threads = [threading.Thread(target=drain, args=(s, f"owner{n}"))
               for n, s in enumerate((store, other, store, other))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    other.close()
    assert sorted(claims) == [f"{i:032x}" for i in range(6)]


def test_recovery_requeues_then_fails_interrupted_jobs(store):
    _submit(store, "9" * 32)
    store.claim_next("host/1/dead", lease_s=30)
    alive = store.recover(lambda owner: False, max_attempts=2)
    assert alive.requeued == [] and alive.failed == []  # lease valid, owner not known dead
    result = store.recover(lambda owner: owner == "host/1/dead", max_attempts=2)
    assert result.requeued == ["9" * 32]
    job = store.get("9" * 32, None)
    assert job.state == "queued" and "interrupted" in job.note
    store.claim_next("host/2/dead", lease_s=0.01)
    time.sleep(0.05)
    result = store.recover(lambda owner: False, max_attempts=2)  # the lease ran out
    assert result.failed == ["9" * 32]
    job = store.get("9" * 32, None)
    assert job.state == "failed" and job.error["error"] == "interrupted" and job.retryable
    assert job.error_status == 409


@contextmanager
def _another_instance_writing(url: str, *statements: str) -> Iterator[None]:
    """Another instance in the middle of a write transaction, holding what it touched (SQLite:
    the database's write lock; PostgreSQL: the rows), until the block ends and it commits."""
    engine = create_engine(url)
    connection = engine.connect()
    if connection.dialect.name == "sqlite":
        connection.exec_driver_sql("PRAGMA journal_mode=WAL")
        connection.exec_driver_sql("BEGIN IMMEDIATE")
    for statement in statements:
        connection.execute(text(statement))
    try:
        yield
    finally:
        connection.commit()
        connection.close()
        engine.dispose()


def test_recovery_never_undoes_a_finish_in_progress(store, database_url):
    """The owner, presumed dead, is finishing its job as another instance recovers it: the job
    stays done (recovery judges the row as it is, never a stale copy)."""
    plan_id = "6" * 32
    _submit(store, plan_id)
    store.claim_next("host/1/slow", lease_s=0.01)
    time.sleep(0.05)  # the lease ran out
    results: list = []
    recovering = threading.Thread(
        target=lambda: results.append(store.recover(lambda owner: True, max_attempts=2)))
    finish = f"UPDATE plan_jobs SET state = 'done', plan_json = '{{}}' WHERE plan_id = '{plan_id}'"
    with _another_instance_writing(database_url, finish):
        recovering.start()
        recovering.join(timeout=1.0)
    recovering.join(timeout=30)
    assert results and results[0].requeued == []
    assert store.get(plan_id, None).state == "done"


def test_a_claim_passes_over_a_job_another_instance_is_claiming(store, database_url):
    if database_url.startswith("sqlite"):
        pytest.skip("SQLite has one writer at a time: a claim waits, there is nothing to pass")
    first, second = "4" * 32, "5" * 32
    _submit(store, first)
    _submit(store, second)
    claims: list = []
    claiming = threading.Thread(target=lambda: claims.append(store.claim_next("me", 30)))
    lock = f"SELECT plan_id FROM plan_jobs WHERE plan_id = '{first}' FOR UPDATE"
    with _another_instance_writing(database_url, lock):
        claiming.start()
        claiming.join(timeout=5)
        assert claims and claims[0].plan_id == second, "the claim waited for a locked job"
    claiming.join(timeout=30)


def test_graceful_release_does_not_count_the_attempt(store):
    _submit(store, "8" * 32)
    claim = store.claim_next("me", 30)
    assert store.release_owned("me", [claim.plan_id]) == 1
    job = store.get(claim.plan_id, None)
    assert job.state == "queued" and job.attempts == 0


def test_owner_liveness():
    me = "here/1/abc"
    assert owner_is_gone(None, me)
    assert not owner_is_gone(me, me)
    host = socket.gethostname()
    assert owner_is_gone(f"{host}/{os.getpid()}/older", me)  # this pid, an earlier life
    assert not owner_is_gone(f"{host}/1/x", me) or not os.path.exists("/proc/1")
    assert not owner_is_gone(f"elsewhere/{os.getpid()}/x", me)  # other hosts: by lease only
    dead = 2**22 + 12345
    while os.path.exists(f"/proc/{dead}"):
        dead += 1
    assert owner_is_gone(f"{host}/{dead}/x", me)


def test_blobs_are_content_addressed(tmp_path):
    blobs = ModelBlobs(tmp_path)
    first = blobs.new_upload()
    first.write(b"abc")
    sha = first.commit()
    second = blobs.new_upload()
    second.write(b"abc")
    assert second.commit() == sha
    assert blobs.path_for(sha).read_bytes() == b"abc"
    dropped = blobs.new_upload()
    dropped.write(b"zzz")
    dropped.discard()
    assert list((tmp_path / "tmp").iterdir()) == []
    with pytest.raises(ValueError):
        blobs.path_for("../../etc/passwd")
