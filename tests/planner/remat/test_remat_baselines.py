"""Every baseline produces a schedule the plan builder turns into a plan the validator accepts."""

from __future__ import annotations

import random

import pytest

from planner.ir.graph import load_graph
from planner.ir.graph_json import graph_from_node_link
from planner.order import optimize_order
from planner.plan.builder import build_plan
from planner.plan.validate import validate_plan
from planner.profile import QUICK_POLICY, profile_graph
from planner.profile.costs import costs_from_profile
from planner.remat import baselines
from planner.remat.configure import configure
from planner.remat.rematerialize import plan_remat
from schemas.plan import ComputeStep, PlanRequest
from tests.support.chains import chain_json
from tests.support.fixture_zoo import model_path


@pytest.fixture(scope="module")
def cnn():
    graph = load_graph(model_path("cnn_bn_momentum"))
    profile = profile_graph(graph, ["cpu"], cache=None, policy=QUICK_POLICY)
    order = optimize_order(graph, time_limit=2).order
    return graph, profile, costs_from_profile(profile, graph, ["cpu"]), order


def validated(graph, profile, schedule, budget, alignment=64):
    request = PlanRequest(budgets={"cpu": budget}, profile=profile, time_limit_s=5,
                          alignment=alignment)
    plan = build_plan(graph, schedule, request, plan_id="baseline", planner_version="test",
                      solvers=[], layout_time_limit=5).plan
    report = validate_plan(graph, plan, profile)
    assert report.ok, report.errors[:3]
    return plan, report


def test_baselines_on_cnn_validate_and_the_solver_is_not_slower(cnn):
    graph, profile, costs, order = cnn
    keep = baselines.keep_all(graph, order, "cpu", costs)
    budget = int(keep.stats.peaks["cpu"] * 0.9)
    configured = configure(graph, order, costs, {"cpu": budget})
    results = [
        keep,
        baselines.chen_sqrt(configured.fine, costs),
        baselines.greedy(configured.fine, {"cpu": budget}, costs),
        baselines.checkmate_lp(configured.problem, {"cpu": budget}, costs, time_limit=20),
    ]
    assert baselines.chain_dp(graph, {"cpu": budget}, costs).note == "not a chain"
    fitting = []
    for result in results:
        assert result.schedule is not None, (result.name, result.note)
        plan, report = validated(graph, profile, result.schedule, 1 << 40)
        assert report.ok
        assert report.predicted_seconds == pytest.approx(result.stats.seconds)
        if result.fits({"cpu": budget}):
            fitting.append(result)
    assert {r.name for r in fitting} & {"greedy", "checkmate-lp"}
    ours = plan_remat(graph, order, {"cpu": budget}, costs, time_limit=10, workers=2)
    assert ours.schedule is not None
    validated(graph, profile, ours.schedule, budget)
    assert ours.objective_seconds <= min(r.stats.seconds for r in fitting) + 1e-12
    assert any(isinstance(s, ComputeStep) and s.recompute
               for s in validated(graph, profile, ours.schedule, budget)[0].steps)


def test_chain_dp_baseline_validates():
    data = chain_json(random.Random(3), 6)
    graph, profile = graph_from_node_link(data, name="chain")
    costs = costs_from_profile(profile, graph, ["cpu"])
    result = baselines.chain_dp(graph, {"cpu": 30}, costs)
    assert result.schedule is not None and result.fits({"cpu": 30})
    plan, report = validated(graph, profile, result.schedule, 30, alignment=1)
    assert max(report.live_bytes["cpu"]) <= 30
    assert sum(isinstance(s, ComputeStep) and s.recompute for s in plan.steps) > 0
