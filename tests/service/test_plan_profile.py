"""A plan id names the request, so the service keeps the profile a plan was made with.

A real `arenaplan serve` on loopback with two API keys: a request without a profile whose budget
needs rematerialization is planned with costs the solver measures; `GET /plans/{id}/profile`
serves that profile, which covers every op of the model, and planning again with it (the
`arenaplan plan` command, on this machine) gives the same steps as the stored plan. A request
that carried its profile, and one that needed no costs, have no profile to fetch (404 saying
why); so has a plan not yet done. Namespaces and keys apply as on `GET /plans/{id}`.
"""

from __future__ import annotations

import json

import pytest

from planner.ir.graph import load_plan_graph
from planner.pipeline import plan_model
from schemas.plan import Plan, PlanRequest
from schemas.profile import Profile
from schemas.service import ApiError, PlanStatus
from tests.support.fixture_zoo import model_path
from tests.support.profiles import measured_profile
from tests.support.service import ServiceProcess, cli, get, metric, submit, wait_for

ALICE = "alice-key-0123456789"
BOB = "bob-key-9876543210"
TIME_LIMIT_S = 3.0


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    service = ServiceProcess(tmp_path_factory.mktemp("profiles"), workers=1,
                             env={"ARENAPLAN_API_KEYS": f"alice:{ALICE},bob:{BOB}"})
    service.start()
    yield service
    service.stop()


@pytest.fixture(scope="module")
def tight_budget() -> int:
    """A budget just below mlp_sgd's keep-everything arena: the plan needs per-op costs."""
    generous = plan_model(model_path("mlp_sgd"), PlanRequest(budgets={"cpu": 2**40}))
    return int(generous.devices[0].arena_bytes * 0.97)


def _status(server, plan_id: str) -> PlanStatus:
    return PlanStatus.model_validate_json(get(server.url, f"/plans/{plan_id}/status", ALICE).text)


def _not_found(response, *phrases: str) -> ApiError:
    assert response.status_code == 404, (response.status_code, response.text[:400])
    error = ApiError.model_validate_json(response.text)
    assert error.error == "not_found"
    for phrase in phrases:
        assert phrase in error.detail, (phrase, error.detail)
    return error


def test_a_measured_profile_is_kept_and_reproduces_the_plan(server, tight_budget, tmp_path):
    model = model_path("mlp_sgd")
    request = PlanRequest(budgets={"cpu": tight_budget}, time_limit_s=TIME_LIMIT_S)
    answer = submit(server.url, model, request.model_dump_json(), key=ALICE, wait=120)
    assert answer.status_code == 200, answer.text[:400]
    plan = Plan.model_validate_json(answer.text)
    assert any(getattr(step, "recompute", False) for step in plan.steps), "expected remat"
    assert _status(server, plan.plan_id).profile == "measured"

    fetched = get(server.url, f"/plans/{plan.plan_id}/profile", ALICE)
    assert fetched.status_code == 200, fetched.text[:400]
    profile = Profile.model_validate_json(fetched.text)
    graph = load_plan_graph(model, plan)
    assert profile.model_sha256 == plan.model_sha256 == graph.model_sha256
    assert [op.op_id for op in profile.ops] == [op.id for op in graph.ops]
    assert all("cpu" in op.costs for op in profile.ops)
    stored = server.directory / "models" / "plans" / plan.plan_id[:2]
    assert (stored / f"{plan.plan_id}.profile.json").read_bytes() == fetched.content

    # the same request on this machine, pinned to those costs, makes the same decisions
    (tmp_path / "profile.json").write_bytes(fetched.content)
    local = cli("plan", str(model), "--budget", f"cpu={tight_budget}", "--time-limit",
                str(TIME_LIMIT_S), "--profile", str(tmp_path / "profile.json"),
                "--graph-optimization", plan.request.graph_optimization,
                "-o", str(tmp_path / "plan.json"), timeout=300)
    assert local.returncode == 0, local.stderr[-2000:]
    replanned = Plan.model_validate_json((tmp_path / "plan.json").read_text())
    assert replanned.steps == plan.steps
    assert replanned.buffers == plan.buffers

    # a later identical request: the stored plan and its stored profile, nothing solved
    solves = metric(server.url, "arenaplan_solves_started_total", ALICE)
    again = submit(server.url, model, request.model_dump_json(), key=ALICE)
    assert again.status_code == 200 and again.content == answer.content
    assert get(server.url, f"/plans/{plan.plan_id}/profile", ALICE).content == fetched.content
    assert metric(server.url, "arenaplan_solves_started_total", ALICE) == solves


def test_the_profile_follows_the_plans_access_rules(server, tight_budget):
    request = PlanRequest(budgets={"cpu": tight_budget}, time_limit_s=TIME_LIMIT_S)
    answer = submit(server.url, model_path("mlp_sgd"), request.model_dump_json(), key=ALICE,
                    wait=120)
    assert answer.status_code == 200, answer.text[:400]
    path = f"/plans/{answer.json()['plan_id']}/profile"
    assert get(server.url, path, ALICE).status_code == 200
    _not_found(get(server.url, path, BOB), "no plan")
    for key in (None, "wrong-key-000000"):
        refused = get(server.url, path, key)
        assert refused.status_code == 401 and refused.json()["error"] == "unauthorized"
    _not_found(get(server.url, f"/plans/{'e' * 32}/profile", ALICE), "no plan")
    _not_found(get(server.url, "/plans/nope/profile", ALICE), "32 lowercase hex digits")


def test_a_supplied_profile_is_not_served_back(server, tight_budget):
    request = PlanRequest(budgets={"cpu": tight_budget}, time_limit_s=TIME_LIMIT_S,
                          profile=measured_profile("mlp_sgd"))
    answer = submit(server.url, model_path("mlp_sgd"), request.model_dump_json(), key=ALICE,
                    wait=120)
    assert answer.status_code == 200, answer.text[:400]
    plan_id = answer.json()["plan_id"]
    _not_found(get(server.url, f"/plans/{plan_id}/profile", ALICE),
               "carried its own profile", "request.profile")
    assert _status(server, plan_id).profile == "supplied"
    assert not list((server.directory / "models" / "plans").glob(f"*/{plan_id}.profile.json"))


def test_no_profile_while_solving_nor_when_no_costs_were_needed(server):
    request = PlanRequest(budgets={"cpu": 2**40}, time_limit_s=3, seed=5)
    accepted = submit(server.url, model_path("resnet18_narrow"), request.model_dump_json(),
                      key=ALICE, wait=0)
    assert accepted.status_code == 202, accepted.text[:300]
    plan_id = accepted.json()["plan_id"]
    _not_found(get(server.url, f"/plans/{plan_id}/profile", ALICE), "still", "status")
    assert _status(server, plan_id).profile is None
    done = wait_for(server.url, plan_id, timeout=120, key=ALICE)
    assert done.status_code == 200, done.text[:300]
    assert json.loads(done.text)["predicted_seconds"] is None
    _not_found(get(server.url, f"/plans/{plan_id}/profile", ALICE), "needed no per-op costs")
    assert _status(server, plan_id).profile == "none"
