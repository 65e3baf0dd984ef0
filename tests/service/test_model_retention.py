"""Retention of uploaded models (`service.retention`): idle blobs go after the retention, those
of queued and running jobs never do, an upload starts the retention over; on a real server the
plan and its report outlive the model, and uploading it again restores it."""

from __future__ import annotations

import hashlib
import os
import time

import pytest

from service.blobs import ModelBlobs
from service.retention import ModelRetention
from service.store import Store
from tests.support.fixture_zoo import model_path
from tests.support.service import ServiceProcess, get, request_json, submit

DAY = 86400.0


def store_blob(blobs: ModelBlobs, data: bytes, age_s: float = 0.0) -> str:
    writer = blobs.new_upload()
    writer.write(data)
    sha = writer.commit()
    when = time.time() - age_s
    os.utime(blobs.path_for(sha), (when, when))
    return sha


@pytest.fixture
def stores(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    yield ModelBlobs(tmp_path / "models"), store
    store.close()


def test_idle_blobs_go_unless_a_job_needs_them(stores):
    blobs, store = stores
    old = 2 * DAY
    queued, running, done, refused, recent = (
        store_blob(blobs, f"model {name}".encode(), age) for name, age in
        (("queued", old), ("running", old), ("done", old), ("refused", old), ("recent", 60)))
    for index, sha in enumerate((done, running, queued)):  # each claimed before the next
        store.submit(f"{index:032x}", sha, "v", "{}", None, max_queued=10)
        if sha != queued:
            claim = store.claim_next("me", 60)
            assert claim is not None and claim.model_sha256 == sha
    assert store.finish(f"{0:032x}", "me", solve_seconds=1, plan_json="{}")
    removed = ModelRetention(blobs, store, retention_s=DAY).sweep()
    assert sorted(removed) == sorted([done, refused])
    assert {sha: blobs.exists(sha) for sha in (queued, running, done, refused, recent)} == {
        queued: True, running: True, done: False, refused: False, recent: True}
    assert (blobs.root / "tmp").is_dir()  # the folders beside the blobs are left alone


def test_an_upload_starts_the_retention_over(stores):
    blobs, store = stores
    sha = store_blob(blobs, b"uploaded long ago", age_s=2 * DAY)
    assert store_blob(blobs, b"uploaded long ago") == sha  # the same bytes again, now
    assert ModelRetention(blobs, store, retention_s=DAY).sweep() == []
    assert blobs.exists(sha)


def test_no_retention_keeps_everything(stores):
    blobs, store = stores
    sha = store_blob(blobs, b"ancient", age_s=1000 * DAY)
    ModelRetention(blobs, store, retention_s=0).sweep_when_due()
    assert blobs.exists(sha)


def test_a_served_plan_outlives_its_model(tmp_path):
    server = ServiceProcess(tmp_path, env={"ARENAPLAN_MODEL_RETENTION_S": "2",
                                           "ARENAPLAN_LEASE_S": "1"}).start()
    try:
        model = model_path("mlp_sgd")
        sha = hashlib.sha256(model.read_bytes()).hexdigest()
        blob = tmp_path / "models" / sha[:2] / sha
        answer = submit(server.url, model, request_json(time_limit_s=1), wait=60)
        assert answer.status_code == 200, answer.text[:300]
        refused = submit(server.url, b"not onnx at all", request_json(budget=1), wait=60)
        assert refused.status_code == 422
        refused_blob = tmp_path / "models" / hashlib.sha256(b"not onnx at all").hexdigest()[:2]
        deadline = time.monotonic() + 30
        while (blob.exists() or any(refused_blob.iterdir())) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not blob.exists() and not any(refused_blob.iterdir())
        plan_id = answer.json()["plan_id"]
        fetched = get(server.url, f"/plans/{plan_id}")
        assert fetched.status_code == 200 and fetched.content == answer.content
        assert get(server.url, f"/plans/{plan_id}/report").status_code == 200
        again = submit(server.url, model, request_json(time_limit_s=1))
        assert again.status_code == 200 and blob.exists()  # uploaded again: restored
    finally:
        server.stop()
