"""The planning service end to end: a real `arenaplan serve` on loopback, a real SQLite file.

Uploads every fixture and validates the plans it answers, repeats a request and checks that no
new solve ran, fetches by id from the CLI, follows a job's progress, and checks that every bad
input gets its 4xx with a message that says what to change (and never a 500).
"""

from __future__ import annotations

import hashlib
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from planner.ir.graph import load_plan_graph
from planner.plan.validate import validate_plan
from planner.version import PLANNER_VERSION
from schemas.optimized_graph import SERVICE_DEFAULT
from schemas.plan import Plan, PlanRequest, compute_plan_id
from schemas.service import ApiError, PlanList, PlanStatus
from tests.support.fixture_zoo import REQUIRED, model_path
from tests.support.onnx_builders import (
    calling_local_functions,
    negative_dim_input,
    no_nodes,
    tiny_momentum_step,
)
from tests.support.profiles import measured_profile, renamed
from tests.support.service import (
    ServiceProcess,
    cli,
    get,
    metric,
    request_json,
    submit,
    wait_for,
)

MAX_UPLOAD = 1 << 20  # small, so the oversize test sends little
MAX_TIME_LIMIT = 600


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    service = ServiceProcess(tmp_path_factory.mktemp("service"), workers=2,
                             env={"ARENAPLAN_MAX_UPLOAD_BYTES": str(MAX_UPLOAD),
                                  "ARENAPLAN_MAX_TIME_LIMIT_S": str(MAX_TIME_LIMIT)})
    service.start()
    yield service
    service.stop()


def test_health_readiness_and_openapi(server):
    assert get(server.url, "/healthz").json() == {"status": "ok"}
    ready = get(server.url, "/readyz").json()
    assert ready["status"] == "ready" and ready["workers"] == 2 and ready["workers_alive"] >= 1
    spec = get(server.url, "/openapi.json").json()
    schemas = spec["components"]["schemas"]
    assert {"Plan", "PlanRequest", "PlanStatus", "ApiError", "PlanList"} <= set(schemas)
    body_schema = spec["paths"]["/plan"]["post"]["requestBody"]["content"]["multipart/form-data"]
    assert body_schema["schema"]["properties"]["request"]["$ref"].endswith("/PlanRequest")
    assert {"/plan", "/plans/{plan_id}", "/plans", "/metrics"} <= set(spec["paths"])
    docs = get(server.url, "/docs")
    assert docs.status_code == 200 and "swagger" in docs.text.lower()


def test_every_fixture_gets_a_valid_plan(server):
    def plan_one(name: str) -> tuple[str, httpx.Response]:
        return name, submit(server.url, model_path(name), request_json(time_limit_s=1),
                            wait=120)

    with ThreadPoolExecutor(len(REQUIRED)) as pool:
        answers = dict(pool.map(plan_one, REQUIRED))
    for name, response in answers.items():
        assert response.status_code == 200, (name, response.text[:300])
        plan = Plan.model_validate_json(response.text)
        data = model_path(name).read_bytes()
        sha = hashlib.sha256(data).hexdigest()
        assert plan.model_sha256 == sha
        assert plan.plan_id == compute_plan_id(sha, plan.request, PLANNER_VERSION)
        report = validate_plan(load_plan_graph(data, plan), plan)
        assert report.ok, (name, report.errors[:3])


def test_repeat_request_returns_the_stored_plan_without_solving(server):
    model = model_path("mlp_sgd")
    request = request_json(time_limit_s=1, seed=11)
    first = submit(server.url, model, request)
    assert first.status_code == 200, first.text[:300]
    solves = metric(server.url, "arenaplan_solves_started_total")
    cached = metric(server.url, "arenaplan_plan_submissions_total", outcome="cached")
    started = time.perf_counter()
    again = submit(server.url, model, request)
    elapsed = time.perf_counter() - started
    assert again.status_code == 200
    assert again.json()["plan_id"] == first.json()["plan_id"]
    assert again.content == first.content
    assert elapsed < 1.0, f"a stored plan took {elapsed:.2f} s"
    assert metric(server.url, "arenaplan_solves_started_total") == solves
    assert metric(server.url, "arenaplan_plan_submissions_total", outcome="cached") == cached + 1
    sha = hashlib.sha256(model.read_bytes()).hexdigest()
    listed = PlanList.model_validate_json(get(server.url, "/plans",
                                              params={"model_sha256": sha}).text)
    entry = next(p for p in listed.plans if p.plan_id == first.json()["plan_id"])
    assert entry.status == "done" and entry.attempts == 1
    assert all(p.model_sha256 == sha for p in listed.plans)
    assert get(server.url, "/plans", params={"model_sha256": "abc"}).status_code == 422


def test_a_stored_plan_is_served_as_stored_bytes_gzip_when_accepted(server):
    answer = submit(server.url, model_path("mlp_sgd"), request_json(time_limit_s=1, seed=13))
    assert answer.status_code == 200, answer.text[:300]
    plan_id = answer.json()["plan_id"]
    plain, packed = (get(server.url, f"/plans/{plan_id}", headers={"Accept-Encoding": accept})
                     for accept in ("identity", "gzip"))
    assert plain.status_code == packed.status_code == 200
    assert plain.content == packed.content == answer.content  # decoded: the same bytes
    assert "content-encoding" not in plain.headers
    assert packed.headers["content-encoding"] == "gzip"
    assert int(packed.headers["content-length"]) < len(plain.content) / 3
    assert plain.headers["vary"] == packed.headers["vary"] == "Accept-Encoding"
    stored = server.directory / "models" / "plans" / plan_id[:2] / f"{plan_id}.json"
    assert stored.read_bytes() == plain.content  # written once, when the job finished


def test_the_status_reports_the_real_solve_time(server):
    started = time.perf_counter()
    answer = submit(server.url, model_path("cnn_bn_momentum"),
                    request_json(time_limit_s=1, seed=14), wait=120)
    waited = time.perf_counter() - started
    assert answer.status_code == 200, answer.text[:300]
    plan = Plan.model_validate_json(answer.text)
    status = PlanStatus.model_validate_json(
        get(server.url, f"/plans/{plan.plan_id}/status").text)
    assert status.status == "done" and status.plan_id == plan.plan_id
    assert status.solve_seconds is not None and status.finished_at and status.started_at
    # the job's wall time: every solver phase and what lies between them, within the wait
    assert sum(s.seconds for s in plan.solvers) <= status.solve_seconds <= waited
    elapsed = (status.finished_at - status.started_at).total_seconds()
    assert abs(elapsed - status.solve_seconds) < 0.5
    _error(get(server.url, "/plans/" + "e" * 32 + "/status"), 404, "not_found")


def test_the_report_of_a_plan_is_served_as_html(server):
    answer = submit(server.url, model_path("mlp_sgd"), request_json(time_limit_s=1, seed=12))
    assert answer.status_code == 200, answer.text[:300]
    plan_id = answer.json()["plan_id"]
    page = get(server.url, f"/plans/{plan_id}/report")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert plan_id in page.text and "<svg" in page.text and "forward" in page.text
    assert "http://" not in page.text.replace("http://www.w3.org", "")  # self-contained
    assert get(server.url, "/plans/" + "0" * 32 + "/report").status_code == 404


def test_fetch_by_id_from_the_command_line(server, tmp_path):
    model = str(model_path("cnn_bn_momentum"))
    options = ["--budget", "cpu=1TiB", "--time-limit", "1", "--seed", "3"]
    offline = cli("plan-id", model, *options)
    assert offline.returncode == 0, offline.stderr
    plan_id = offline.stdout.strip()
    request = PlanRequest(budgets={"cpu": 2**40}, time_limit_s=1, seed=3,
                          graph_optimization=SERVICE_DEFAULT).model_dump_json()  # the CLI's
    answer = submit(server.url, model_path("cnn_bn_momentum"), request)
    assert answer.status_code == 200 and answer.json()["plan_id"] == plan_id
    out = tmp_path / "plan.json"
    fetched = cli("fetch", plan_id, "--server", server.url, "-o", str(out))
    assert fetched.returncode == 0, fetched.stderr
    assert Plan.model_validate_json(out.read_text()).plan_id == plan_id
    missing = cli("fetch", "0" * 32, "--server", server.url, "-o", str(tmp_path / "x.json"))
    assert missing.returncode == 2 and "no plan" in missing.stderr
    assert not (tmp_path / "x.json").exists()
    tiny = submit(server.url, model_path("cnn_bn_momentum"),
                  request_json(budget=1024, time_limit_s=1))
    assert tiny.status_code == 409
    infeasible = cli("fetch", tiny.json()["plan_id"], "--server", server.url, "-o",
                     str(tmp_path / "y.json"))
    assert infeasible.returncode == 3 and "ask for at least" in infeasible.stderr


def test_progress_is_reported_while_solving_and_the_api_stays_responsive(server):
    """A budget that needs recomputation (2.9 MiB of the 3.1 MiB keep-everything arena), so
    that the solve lasts: keeping everything, the plan was done within the first poll on a
    fast host and the test never saw it running. (2.6 MiB of 3.9 MiB until the late
    recomputation of cheap values, schemas.late_recompute, shrank that arena: at 3 s it was
    refused.)"""
    request = request_json(budget=int(2.9 * 2**20), time_limit_s=3, seed=5)
    accepted = submit(server.url, model_path("resnet18_narrow"), request, wait=0)
    assert accepted.status_code == 202, accepted.text[:300]
    status = PlanStatus.model_validate_json(accepted.text)
    assert accepted.headers["location"] == status.url
    assert status.url.endswith(f"/plans/{status.plan_id}")
    running = wait_for(server.url, status.plan_id, until=(202,), timeout=30,
                       predicate=lambda r: (r.json().get("progress") or {}).get("phase")
                       not in (None, "start", "load"))
    progress = PlanStatus.model_validate_json(running.text).progress
    assert progress.phase not in ("start", "load")  # the planner's own phase names
    assert progress.elapsed_s > 0
    started = time.perf_counter()
    assert get(server.url, "/healthz").status_code == 200
    assert get(server.url, "/plans").status_code == 200
    assert time.perf_counter() - started < 1.0
    done = wait_for(server.url, status.plan_id, timeout=60)
    assert done.status_code == 200 and done.json()["plan_id"] == status.plan_id


def _error(response: httpx.Response, status: int, code: str, *phrases: str) -> ApiError:
    assert response.status_code == status, (response.status_code, response.text[:400])
    error = ApiError.model_validate_json(response.text)
    assert error.error == code, error
    for phrase in phrases:
        assert phrase in error.detail, (phrase, error.detail)
    return error


def test_infeasible_budget_says_the_smallest_feasible_one(server):
    response = submit(server.url, model_path("mlp_sgd"),
                      request_json(budget=4096, time_limit_s=1))
    error = _error(response, 409, "infeasible", "ask for at least")
    assert error.smallest_feasible_bytes and error.smallest_feasible_bytes > 4096
    assert str(error.smallest_feasible_bytes) in error.detail
    again = get(server.url, f"/plans/{error.plan_id}")
    assert ApiError.model_validate_json(again.text) == error and again.status_code == 409
    feasible = submit(server.url, model_path("mlp_sgd"),
                      request_json(budget=error.smallest_feasible_bytes, time_limit_s=1))
    if error.is_lower_bound and feasible.status_code == 409:
        # A proven lower bound need not be achievable: the answer then names what is.
        achieved = ApiError.model_validate_json(feasible.text)
        assert achieved.smallest_feasible_bytes >= error.smallest_feasible_bytes
        assert not achieved.is_lower_bound
        feasible = submit(server.url, model_path("mlp_sgd"),
                          request_json(budget=achieved.smallest_feasible_bytes, time_limit_s=1))
    assert feasible.status_code == 200, feasible.text[:300]


def test_model_errors_are_422(server):
    _error(submit(server.url, b"this is not onnx", request_json()), 422, "invalid_model",
           "not an ONNX model")
    symbolic = tiny_momentum_step().SerializeToString()
    _error(submit(server.url, symbolic, request_json()), 422, "invalid_model", "batch")
    bound = submit(server.url, symbolic, request_json(dims={"batch": 4}, time_limit_s=1))
    assert bound.status_code == 200, bound.text[:300]
    _error(submit(server.url, b"", request_json()), 422, "invalid_model", "empty")


@pytest.mark.parametrize(("model", "phrase"), [
    (calling_local_functions("f", "g"), "local::f -> local::g -> local::f"),
    (negative_dim_input(), "dimension -3"),
    (no_nodes(), "no nodes"),
])
def test_models_the_planner_cannot_read_are_a_final_422(server, model, phrase):
    """Issue 15, F5: these were 409 "a bug in arenaplan" (retryable: solved again each time)."""
    response = submit(server.url, model.SerializeToString(), request_json(time_limit_s=1))
    error = _error(response, 422, "invalid_model", phrase)
    assert get(server.url, f"/plans/{error.plan_id}").status_code == 422


@pytest.mark.parametrize(("request_text", "phrase"), [
    ('{"budgets": {"tpu:0": 1000}}', "unknown device 'tpu:0'"),
    ('{"budgets": {"cpu": 1000}', "Invalid JSON"),
    ('{"budgets": {}}', "budgets"),
    ('{"budgets": {"cpu": -5}}', "positive"),
    ('{"budgets": {"cpu": 1000}, "colour": "red"}', "colour"),
    ('{"budgets": {"cpu": 1000}, "time_limit_s": 0}', "time_limit_s"),
    ('[1, 2]', "PlanRequest"),
    ('{"budgets": {"cpu": 1000}, "dims": {"batch": 0}}', "batch"),
    # issue 15, F5 and F6: each used to be accepted, then failed as "a bug" (409) or planned
    ('{"budgets": {"cuda:0\\n": 1000}}', "unknown device 'cuda:0\\n'"),
    ('{"budgets": {"cpu": true}}', "valid integer"),
    ('{"budgets": {"cpu": 1000}, "alignment": true}', "valid integer"),  # schemathesis
    ('{"budgets": {"cpu": 1000}, "time_limit_s": true}', "valid number"),
    ('{"budgets": {"cpu": 1000}, "seed": 2147483648}', "less than 2147483648"),
    ('{"budgets": {"cpu": 1000}, "dims": {"batch": 9223372036854775808}}', "less than"),
])
def test_malformed_requests_are_422(server, request_text, phrase):
    response = submit(server.url, model_path("mlp_sgd"), request_text)
    error = _error(response, 422, "invalid_request", phrase)
    assert error.errors


def test_malformed_http_input_is_4xx(server):
    url = server.url
    model = model_path("mlp_sgd").read_bytes()
    _error(httpx.post(url + "/plan", json={"budgets": {"cpu": 1}}), 415,
           "unsupported_media_type", "multipart/form-data")
    _error(httpx.post(url + "/plan", files={"model": ("m.onnx", model)}), 422, "bad_request",
           "missing form field(s) request")
    _error(httpx.post(url + "/plan", files={"request": (None, request_json())}), 422,
           "bad_request", "missing form field(s) model")
    _error(httpx.post(url + "/plan", files={"model": ("m.onnx", model), "request":
                                            (None, request_json()), "extra": (None, "x")}),
           422, "bad_request", "unexpected form field 'extra'")
    truncated = (b'--b\r\nContent-Disposition: form-data; name="request"\r\n\r\n{}\r\n--b\r\n'
                 b'Content-Disposition: form-data; name="model"; filename="m"\r\n\r\nabc')
    _error(httpx.post(url + "/plan", content=truncated,
                      headers={"content-type": "multipart/form-data; boundary=b"}),
           400, "bad_request", "ended early")
    _error(httpx.post(url + "/plan?wait=soon", files={"model": ("m.onnx", model)}), 422,
           "invalid_request", "wait")
    _error(get(url, "/plans/not-an-id"), 404, "not_found", "32 lowercase hex")
    _error(get(url, "/plans/" + "f" * 32), 404, "not_found", "POST /plan")
    _error(get(url, "/nowhere"), 404, "not_found", "/docs")
    assert httpx.delete(url + f"/plans/{'f' * 32}").status_code == 405
    _error(submit(url, model, request_json(time_limit_s=MAX_TIME_LIMIT + 1)), 422,
           "invalid_request", "above this service's limit")


def test_openapi_describes_what_is_sent(server):
    spec = get(server.url, "/openapi.json").json()
    budgets = spec["components"]["schemas"]["PlanRequest"]["properties"]["budgets"]
    assert budgets["propertyNames"]["pattern"] == r"^(?:cpu(:\d+)?|cuda:\d+)$"
    assert budgets["additionalProperties"]["minimum"] == 1
    answers = [(path, method, status, answer) for path, operations in spec["paths"].items()
               for method, operation in operations.items()
               for status, answer in operation["responses"].items()]
    unprocessable = [(p, m, a) for p, m, status, a in answers if status == "422"]
    assert unprocessable and all(
        a["content"]["application/json"]["schema"]["$ref"].endswith("/ApiError")
        for _, _, a in unprocessable), unprocessable
    assert "HTTPValidationError" not in spec["components"]["schemas"]
    assert "401" in spec["paths"]["/metrics"]["get"]["responses"]
    sent = get(server.url, "/plans", params={"limit": 0})  # the 422 that GET /plans sends
    assert sent.status_code == 422
    ApiError.model_validate(sent.json())


@pytest.mark.parametrize("budgets", [{"cuda:0": 2**40}, {"cpu": 2**40, "cuda:0": 2**40},
                                     {"cpu:1": 2**40, "cuda:1": 2**40}])
def test_gpu_budgets_need_a_profile_alone_or_not(server, budgets):
    request = PlanRequest(budgets=budgets, time_limit_s=1).model_dump_json()
    started = time.perf_counter()
    error = _error(submit(server.url, model_path("mlp_sgd"), request), 422, "invalid_request",
                   "ARENAPLAN_MEASURE_DEVICES")
    assert time.perf_counter() - started < 5  # refused on arrival, not after a solve
    assert "profile" in error.detail and "--device cuda:" in error.detail
    assert error.errors == [f"budgets.{d}: needs a profile with costs on {d}"
                            for d in budgets if d.startswith("cuda")]


def test_a_profile_must_cover_the_budgets_devices(server):
    cpu = measured_profile("mlp_sgd")
    lacking = PlanRequest(budgets={"cpu": 2**40, "cuda:0": 2**40}, profile=cpu)
    _error(submit(server.url, model_path("mlp_sgd"), lacking.model_dump_json()), 422,
           "invalid_request", "no costs on cuda:0")
    covered = PlanRequest(budgets={"cuda:0": 2**40}, time_limit_s=1,
                          profile=renamed(cpu, "cuda:0"))
    answer = submit(server.url, model_path("mlp_sgd"), covered.model_dump_json())
    assert answer.status_code == 200, answer.text[:300]
    assert [d["device"] for d in answer.json()["devices"]] == ["cuda:0"]


def test_oversize_uploads_are_refused_while_streaming(server):
    big = bytes(MAX_UPLOAD + 1)
    _error(submit(server.url, big, request_json()), 413, "too_large", "ARENAPLAN_MAX_UPLOAD")

    def chunked():
        yield (b'--xx\r\nContent-Disposition: form-data; name="request"\r\n\r\n'
               + request_json().encode() + b'\r\n--xx\r\nContent-Disposition: form-data; '
               b'name="model"; filename="m.onnx"\r\n\r\n')
        for _ in range(64):  # 4 MiB in 64 KiB chunks, with no Content-Length
            yield bytes(65536)
        yield b"\r\n--xx--\r\n"

    response = httpx.post(server.url + "/plan", content=chunked(), timeout=30,
                          headers={"content-type": "multipart/form-data; boundary=xx"})
    _error(response, 413, "too_large")
    declared = httpx.post(server.url + "/plan", content=b"x", timeout=30, headers={
        "content-type": "multipart/form-data; boundary=xx", "content-length": "1"})
    assert declared.status_code == 400  # a body that is not multipart at all
    leftovers = list((server.directory / "models" / "tmp").iterdir())
    assert leftovers == [], "refused uploads must not stay on disk"


def test_no_input_produced_a_server_error(server):
    text = get(server.url, "/metrics").text
    assert "arenaplan_http_requests_total" in text
    assert 'status="500"' not in text, [line for line in text.splitlines() if "500" in line]
    assert 'arenaplan_jobs{state="done"}' in text
    assert "Traceback" not in server.log()
