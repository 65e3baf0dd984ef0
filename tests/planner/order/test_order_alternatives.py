"""The other orders ordering found, handed to the rematerialization search."""

from __future__ import annotations

from planner.ir.graph import load_graph
from planner.memory.liveness import check_order, lifetimes
from planner.order import optimize_order
from tests.support.fixture_zoo import model_path


def test_alternatives_are_the_other_valid_orders_lowest_peak_first():
    graph = load_graph(model_path("unet_small"), optimization="extended")
    result = optimize_order(graph, use_solver=False)
    assert len(result.alternatives) >= 2
    assert len(set(result.alternatives)) == len(result.alternatives)
    assert result.order not in result.alternatives
    peaks = []
    for order in result.alternatives:
        check_order(graph, order)
        peaks.append(max(lifetimes(graph, order).live_bytes))
    assert peaks == sorted(peaks) and peaks[0] >= result.peak_bytes
