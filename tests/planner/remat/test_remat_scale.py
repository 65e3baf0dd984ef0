"""Issue 4's scale target: a ResNet-18 training graph (1,804 ops) planned at 50% of its
keep-everything peak within 120 s on 2 cores, with status, bound and gap reported.

The graph is bench/scale_models.py's `resnet18_w16_b32` (the fixture's ResNet-18 topology at
batch 32, exported on first use into bench/models/, which needs the export extra). The zoo's
`resnet18_narrow` (batch 4) cannot serve: its parameters and momentum are a third of its peak
and no planner here reaches 50% of it (bench/remat/results.md gives its smallest budget).
"""

from __future__ import annotations

import time

import pytest

from planner.ir.graph import load_graph
from planner.pipeline import plan_model
from planner.plan.validate import validate_plan
from schemas.plan import ComputeStep, PlanRequest
from tests.support.budget_plans import keep_all_peak

pytestmark = pytest.mark.scale

WALL_LIMIT_S = 120
# The planner's own limit: its phases stop at their deadlines, leaving room for loading the
# graph and measuring the profile (about 10 s on 2 cores) inside the 120 s.
TIME_LIMIT_S = 100


@pytest.fixture(scope="module")
def resnet18_path():
    pytest.importorskip("torch", reason="exporting the scale model needs the export extra")
    from bench.scale_models import scale_model_path

    return scale_model_path("resnet18_w16_b32")


def test_resnet18_at_half_its_peak_within_120_seconds(resnet18_path, tmp_path, monkeypatch):
    monkeypatch.setenv("ARENAPLAN_CACHE_DIR", str(tmp_path / "cache"))  # profile measured here
    graph = load_graph(resnet18_path)
    assert len(graph.ops) >= 1500
    budget = int(keep_all_peak(graph) * 0.5)
    started = time.perf_counter()
    plan = plan_model(resnet18_path, PlanRequest(budgets={"cpu": budget},
                                                 time_limit_s=TIME_LIMIT_S, workers=2))
    seconds = time.perf_counter() - started
    assert seconds < WALL_LIMIT_S
    assert plan.devices[0].arena_bytes <= budget
    assert validate_plan(graph, plan).ok
    remat = next(s for s in plan.solvers if s.phase == "remat")
    assert remat.status in ("OPTIMAL", "FEASIBLE")
    assert remat.bound is not None and remat.gap is not None
    assert remat.bound <= remat.objective
    assert any(isinstance(s, ComputeStep) and s.recompute for s in plan.steps)
    print(f"resnet18_w16_b32 at 50% ({budget} B): {remat.status}, overhead "
          f"{remat.objective / remat.baseline:.3f}, gap {remat.gap:.1%}, {seconds:.1f} s")
