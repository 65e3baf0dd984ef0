"""Jittered restarts of the eviction simulation (planner.remat.evict: `jitter`; planner.remat
.rematerialize._restarted): past LARGE_GRAPH_OPS ops they have the time the search left."""

from __future__ import annotations

import numpy as np
import pytest

from planner.ir.graph import load_graph
from planner.order import optimize_order
from planner.profile import QUICK_POLICY, profile_graph
from planner.profile.costs import CostTable, costs_from_profile
from planner.profile.estimate import op_bytes, op_flops
from planner.remat import evict, rematerialize
from planner.remat.problem import RematOptions, forward_phase
from planner.remat.rematerialize import LARGE_GRAPH_OPS, plan_remat
from tests.support.fixture_zoo import model_path


def _planned(name: str):
    graph = load_graph(model_path(name), optimization="extended")
    order = optimize_order(graph, use_solver=False, time_limit=5)
    costs = costs_from_profile(profile_graph(graph, ["cpu"], policy=QUICK_POLICY), graph,
                               ["cpu"])
    return graph, order, costs


def test_a_jittered_eviction_is_drawn_from_its_seed():
    """The same seed gives the same schedule, and the jitter changes the victims chosen."""
    graph, order, costs = _planned("gpt2_tiny_adam")
    forward, _ = forward_phase(graph, order.order, RematOptions())
    budget = int(0.75 * order.peak_bytes)

    def evicted(seed: int | None):
        jitter = None if seed is None else np.random.default_rng(seed)
        found = evict.evict_schedule(graph, order.order, "cpu", budget, costs, forward,
                                     alignment=64, jitter=jitter)
        assert found is not None
        return found.schedule

    assert evicted(1) == evicted(1)
    assert evicted(1) != evicted(None)


@pytest.mark.slow
@pytest.mark.usefixtures("without_late_recompute")
def test_restarts_find_a_faster_schedule_on_a_large_graph(monkeypatch):
    """ResNet-18-narrow (1,700 ops) at persistent + 30% of its activations, with op costs from a
    fixed roofline (a measured profile differs from host to host, and so do the schedules):
    eviction and the fill pass end at 1.414x the keep-everything step in about a second of the
    30 s; a jittered restart reaches 1.386x. With this machine's profile: 1.369x -> 1.286x
    (bench/remat/budgets.md: 1.390x -> 1.346x, the issue asks 1.35x). On the graph without
    our late recomputation, which these figures were measured on (with it, no restart beat the
    first eviction at this budget in the one run made)."""
    graph = load_graph(model_path("resnet18_narrow"), optimization="extended")
    assert len(graph.ops) > LARGE_GRAPH_OPS
    order = optimize_order(graph, use_solver=False, time_limit=5)
    costs = CostTable(("cpu",), tuple(
        {"cpu": max(op_flops(graph, op) / 20e9, op_bytes(graph, op) / 4e9) + 1e-6}
        for op in graph.ops))
    budget = {"cpu": 2_220_255}

    def fastest(restarts: int):
        monkeypatch.setattr(rematerialize, "STALLED_RESTARTS", restarts)
        result = plan_remat(graph, order.order, budget, costs, time_limit=30,
                            other_orders=order.alternatives)
        assert result.best is not None and result.stats is not None
        assert result.stats.peaks["cpu"] <= budget["cpu"]
        return result.best

    restarts = rematerialize.STALLED_RESTARTS
    alone, restarted = fastest(0), fastest(restarts)
    assert "~" not in alone.name and "~" in restarted.name
    assert restarted.seconds < 0.99 * alone.seconds
