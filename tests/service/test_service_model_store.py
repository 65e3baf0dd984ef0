"""Uploads and the service's model store under damage: blobs corrupted on disk, stalled uploads.

Issue 15's hostile test corrupted stored models (same size, other bytes) and left uploads
stalled half-way. The store is at fault in the first case, never the user: answers say what
happened and that uploading the model again repairs it, and nothing answers 500. A stalled
upload is cut off after ARENAPLAN_BODY_READ_TIMEOUT_S with a 408.
"""

from __future__ import annotations

import hashlib
import socket
import time
from pathlib import Path

import pytest

from schemas.service import ApiError
from tests.support.fixture_zoo import model_path
from tests.support.service import ServiceProcess, get, request_json, submit, wait_for

BODY_READ_TIMEOUT_S = 2


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    service = ServiceProcess(tmp_path_factory.mktemp("model-store"), workers=1,
                             env={"ARENAPLAN_BODY_READ_TIMEOUT_S": str(BODY_READ_TIMEOUT_S)})
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


def test_a_stalled_upload_is_cut_off_with_408(server):
    """Issue 15, F9: a client that stops sending half-way held its connection open forever."""
    head = (b"--xx\r\nContent-Disposition: form-data; name=\"model\"; filename=\"m.onnx\""
            b"\r\n\r\n" + bytes(1000))
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(b"POST /plan HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     b"Content-Type: multipart/form-data; boundary=xx\r\n"
                     b"Content-Length: 100000\r\n\r\n" + head)
        started = time.monotonic()
        first = sock.recv(65536)  # then nothing more is sent
        waited = time.monotonic() - started
        rest = iter(lambda: sock.recv(65536), b"")  # the server closes: headers, body may split
        answer = b"".join([first, *rest]).decode("latin-1")
    assert answer.startswith("HTTP/1.1 408"), answer[:300]
    assert BODY_READ_TIMEOUT_S - 0.5 < waited < BODY_READ_TIMEOUT_S + 10
    assert "ARENAPLAN_BODY_READ_TIMEOUT_S" in answer and "send it again" in answer
    assert list((server.directory / "models" / "tmp").iterdir()) == []
