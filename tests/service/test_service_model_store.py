"""The service's model store under damage: blobs corrupted on disk, uploads shared by instances.

Issue 15's hostile test corrupted stored models (same size, other bytes) and started a second
instance on a shared model folder. The store is at fault there, never the user: answers say
what happened and that uploading the model again repairs it, and nothing answers 500.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from schemas.service import ApiError
from tests.support.fixture_zoo import model_path
from tests.support.service import ServiceProcess, get, request_json, submit, wait_for


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    service = ServiceProcess(tmp_path_factory.mktemp("model-store"), workers=1)
    service.start()
    yield service
    service.stop()


def _blob(server: ServiceProcess, data: bytes) -> Path:
    sha = hashlib.sha256(data).hexdigest()
    return server.directory / "models" / sha[:2] / sha


def _corrupt(path: Path) -> None:
    """Overwrite the start of a stored blob, keeping its size (a bad disk, a careless hand)."""
    data = bytearray(path.read_bytes())
    data[:64] = b"\xff" * 64
    path.write_bytes(bytes(data))


def test_report_of_a_plan_whose_stored_model_is_corrupt_is_a_clear_error(server):
    model = model_path("mlp_sgd").read_bytes()
    answer = submit(server.url, model, request_json(time_limit_s=1, seed=101))
    assert answer.status_code == 200, answer.text[:300]
    plan_id = answer.json()["plan_id"]
    _corrupt(_blob(server, model))
    page = get(server.url, f"/plans/{plan_id}/report")
    assert page.status_code == 409, (page.status_code, page.text[:300])
    error = ApiError.model_validate_json(page.text)
    assert error.error == "stored_model_damaged" and error.plan_id == plan_id
    assert "damaged" in error.detail and "upload the model again" in error.detail


def test_a_damaged_blob_is_never_the_users_fault_and_an_upload_repairs_it(server):
    """A queued job whose model is damaged before it runs fails retryably (409, not a final
    422 "not an ONNX model"), and uploading the same model again replaces the damaged file."""
    blocker = submit(server.url, model_path("resnet18_narrow"),
                     request_json(budget=3_000_000, time_limit_s=3), wait=0)
    assert blocker.status_code == 202, blocker.text[:300]  # the one solver is busy with it
    model = model_path("cnn_bn_momentum").read_bytes()
    request = request_json(time_limit_s=1, seed=102)
    queued = submit(server.url, model, request, wait=0)
    assert queued.status_code == 202, queued.text[:300]
    _corrupt(_blob(server, model))
    failed = wait_for(server.url, queued.json()["plan_id"], timeout=60)
    error = ApiError.model_validate_json(failed.text)
    assert (failed.status_code, error.error) == (409, "stored_model_damaged"), failed.text[:300]
    assert "upload the model again" in error.detail
    repaired = submit(server.url, model, request, wait=60)
    assert repaired.status_code == 200, repaired.text[:300]
    assert _blob(server, model).read_bytes() == model
