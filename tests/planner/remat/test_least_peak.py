"""The bisection behind a refusal's smallest budget (planner.remat.smallest.least_peak) aims
first at the peaks the request's own search replayed, and at a peak a probe replayed just above
its aim: aimed elsewhere, eviction may never come back to them (UNet-small at persistent + 30%
of its activations: its search replayed 477,120 B, and a bisection that began at the middle of
its interval named 542,656 B)."""

from __future__ import annotations

import time

import pytest

from planner.ir.graph import load_graph
from planner.memory.liveness import order_lower_bound
from planner.order import optimize_order
from planner.profile import QUICK_POLICY, profile_graph
from planner.profile.costs import costs_from_profile
from planner.remat import smallest
from planner.remat.evict import evict_candidates
from tests.support.fixture_zoo import model_path
from tests.support.probes import record_probe_aims


def test_the_bisection_aims_first_at_a_peak_the_search_replayed(
        monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("ARENAPLAN_CACHE_DIR", str(tmp_path))  # no least peak kept from before
    graph = load_graph(model_path("cnn_bn_momentum"), optimization="extended")
    order = optimize_order(graph, use_solver=False, time_limit=2)
    costs = costs_from_profile(profile_graph(graph, ["cpu"], policy=QUICK_POLICY), graph, ["cpu"])
    lower, upper = order_lower_bound(graph), order.peak_bytes
    reached = evict_candidates(graph, [order.order], "cpu", (lower + upper) // 2, costs,
                               alignment=64, deadline=time.perf_counter() + 1)
    seen = reached.smallest_peak
    assert seen is not None and lower < seen < upper

    aims = record_probe_aims(monkeypatch)
    found = smallest.least_peak(graph, order.order, "cpu", costs, lower, upper, memory_unit=64,
                                time_limit=3.0, seen=(seen,))
    assert aims[0] == seen
    assert found.replayed is not None and found.replayed <= seen
    assert found.budget <= upper
