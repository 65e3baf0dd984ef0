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
from tests.support.service import ServiceProcess, get, request_json, submit


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
