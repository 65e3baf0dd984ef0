"""The report tests' hand-made plan (tests/support/report_plans.py) recomputes, copies and
validates, and its greedy policy keeps only the recomputations that lower the peak."""

from __future__ import annotations

from planner.ir.graph import load_graph
from planner.plan.validate import validate_plan
from schemas.plan import ComputeStep, CopyStep
from tests.support.fixture_zoo import model_path
from tests.support.report_plans import (
    HOME,
    greedy_recompute,
    peak_live_bytes,
    policy_schedule,
    remat_plan,
)


def test_remat_plan_recomputes_copies_and_validates():
    graph, plan = remat_plan()
    report = validate_plan(graph, plan)
    assert report.ok, report.errors[:5]
    recomputes = [s for s in plan.steps if isinstance(s, ComputeStep) and s.recompute]
    copies = [s for s in plan.steps if isinstance(s, CopyStep)]
    assert recomputes and copies and len(copies) % 2 == 0  # round trips
    keep_peak = next(r.baseline for r in plan.solvers if r.phase == "order")
    assert max(report.live_bytes[HOME]) < 0.7 * keep_peak
    assert max(report.live_bytes[HOME]) <= plan.request.budgets[HOME]


def test_greedy_policy_only_keeps_recomputations_that_lower_the_peak():
    graph = load_graph(model_path("mlp_sgd"))
    chosen = greedy_recompute(graph)
    base = peak_live_bytes(graph, policy_schedule(graph))
    assert peak_live_bytes(graph, policy_schedule(graph, chosen)) <= base
    for k in range(len(chosen)):
        assert peak_live_bytes(graph, policy_schedule(graph, chosen[:k + 1])) < \
            peak_live_bytes(graph, policy_schedule(graph, chosen[:k]))
