"""A bounded schemathesis run against the real service on loopback: the requests its OpenAPI
document allows (and the ones it forbids), with an API key and without one, must meet no server
error and no answer outside the document (status, content type, body schema, headers).

Fixed seed, a bounded number of examples per operation; POST /plan answers at once (wait 0) so
generated uploads never wait on a solver. Every check runs but `positive_data_acceptance`: a
schema-valid upload still carries bytes that are no ONNX model, which the document cannot
express, and the service rightly answers 422.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.service import ServiceProcess, get

pytest.importorskip("schemathesis", reason="the schemathesis run needs `pip install schemathesis`")

pytestmark = pytest.mark.slow

KEY = "schemathesis-ci-key"
EXAMPLES = 40
SEED = 15
EXCLUDED = "positive_data_acceptance"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    service = ServiceProcess(tmp_path_factory.mktemp("schemathesis"), workers=1,
                             env={"ARENAPLAN_API_KEYS": f"ci:{KEY}",
                                  "ARENAPLAN_DEFAULT_WAIT_S": "0", "ARENAPLAN_MAX_WAIT_S": "1"})
    service.start()
    yield service
    service.stop()


def schemathesis_command() -> str:
    command = Path(sys.executable).parent / "st"
    return str(command) if command.exists() else shutil.which("st") or "st"


@pytest.mark.parametrize("with_key", [True, False], ids=["key", "no-key"])
def test_generated_requests_meet_the_document(server, with_key, tmp_path):
    headers = ["--header", f"Authorization: Bearer {KEY}"] if with_key else []
    run = subprocess.run(
        [schemathesis_command(), "run", f"{server.url}/openapi.json", "--checks", "all",
         "--exclude-checks", EXCLUDED, "--max-examples", str(EXAMPLES), "--seed", str(SEED),
         "--no-color", "--report-dir", str(tmp_path), *headers],
        capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert run.returncode == 0, run.stdout[-8000:] + run.stderr[-2000:]
    assert "Traceback" not in server.log()
    metrics = get(server.url, "/metrics", KEY).text
    assert 'status="500"' not in metrics
