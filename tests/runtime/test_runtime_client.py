"""The plan client against a real HTTP server on loopback (http.server, a free port)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from arenaplan.cli import main
from runtime.client import API_KEY_ENV, fetch_plan
from runtime.errors import PlanFetchError, PlanNotFoundError, PlanNotReadyError
from tests.support.fixture_zoo import model_path
from tests.support.runtime_plans import full_budget_plan

KEY = "s3cret"


class PlanServer:
    """Serves /plans/{id}: 'good' (200), 'pending' (202), 'soon' (202 twice, then 200),
    'failed' (422 with a detail), 'locked' (200 only with the bearer key), anything else 404."""

    def __init__(self, plan_json: str):
        self.plan_json = plan_json
        self.requests: list[tuple[str, str | None]] = []
        self.soon_calls = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's naming
                server.requests.append((self.path, self.headers.get("Authorization")))
                status, body, headers = server.answer(self.path,
                                                      self.headers.get("Authorization"))
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                return None

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def answer(self, path: str, auth: str | None) -> tuple[int, str, dict]:
        plan_id = path.rsplit("/", 1)[-1]
        pending = json.dumps({"status": "solving"})
        if plan_id == "good":
            return 200, self.plan_json, {}
        if plan_id == "pending":
            return 202, pending, {"Retry-After": "0"}
        if plan_id == "soon":
            self.soon_calls += 1
            if self.soon_calls <= 2:
                return 202, pending, {"Retry-After": "0"}
            return 200, self.plan_json, {}
        if plan_id == "failed":
            return 422, json.dumps({"detail": "budget 1 KiB is infeasible; ask for 65 KiB"}), {}
        if plan_id == "locked":
            if auth != f"Bearer {KEY}":
                return 401, json.dumps({"detail": "missing or wrong API key"}), {}
            return 200, self.plan_json, {}
        return 404, json.dumps({"detail": f"no plan {plan_id}"}), {}

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    with PlanServer(full_budget_plan("mlp_sgd").model_dump_json()) as running:
        yield running


def test_a_finished_plan_is_fetched(server, monkeypatch):
    monkeypatch.delenv(API_KEY_ENV, raising=False)
    plan = fetch_plan(server.url, "good")
    assert plan == full_budget_plan("mlp_sgd")
    assert server.requests == [("/plans/good", None)]


def test_a_plan_still_solving_is_202(server):
    with pytest.raises(PlanNotReadyError, match="still being solved") as info:
        fetch_plan(server.url, "pending")
    assert info.value.status == 202


def test_waiting_polls_until_the_plan_is_ready(server):
    plan = fetch_plan(server.url, "soon", wait_s=10, poll_s=0.01)
    assert plan.plan_id == full_budget_plan("mlp_sgd").plan_id
    assert server.soon_calls == 3


def test_an_unknown_plan_is_404(server):
    with pytest.raises(PlanNotFoundError, match="no plan nope") as info:
        fetch_plan(server.url, "nope")
    assert info.value.status == 404


def test_a_failed_plan_says_why(server):
    with pytest.raises(PlanFetchError, match="ask for 65 KiB") as info:
        fetch_plan(server.url, "failed")
    assert info.value.status == 422


def test_the_api_key_goes_in_a_bearer_header(server, monkeypatch):
    monkeypatch.delenv(API_KEY_ENV, raising=False)
    with pytest.raises(PlanFetchError, match="--api-key"):
        fetch_plan(server.url, "locked")
    assert fetch_plan(server.url, "locked", api_key=KEY).plan_id
    monkeypatch.setenv(API_KEY_ENV, KEY)
    assert fetch_plan(server.url, "locked").plan_id
    assert server.requests[-1] == ("/plans/locked", f"Bearer {KEY}")


def test_an_unreachable_server_and_a_bad_url():
    with PlanServer("{}") as stopped:
        url = stopped.url
    with pytest.raises(PlanFetchError, match="cannot reach"):
        fetch_plan(url, "good", timeout_s=2)
    with pytest.raises(PlanFetchError, match="http"):
        fetch_plan("file:///etc/passwd", "good")


def test_cli_run_from_the_server(server, capsys, monkeypatch):
    model = str(model_path("mlp_sgd"))
    monkeypatch.setenv(API_KEY_ENV, KEY)
    assert main(["run", model, "--server", server.url, "--plan-id", "locked", "--steps", "2",
                 "--check"]) == 0
    assert "check ok" in capsys.readouterr().out
    assert main(["run", model, "--server", server.url, "--plan-id", "pending"]) == 2
    assert "still being solved" in capsys.readouterr().err
    assert main(["run", model, "--server", server.url, "--plan-id", "nope"]) == 2
    assert "404" in capsys.readouterr().err
    assert main(["run", model, "--server", server.url]) == 2
    assert "--plan-id" in capsys.readouterr().err
