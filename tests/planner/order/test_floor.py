"""The keep-everything floor (planner.order.floor): no order goes below it, on small graphs the
best order often meets it, its search finds the largest cut over every op, and ordering reports
it as its bound."""

from __future__ import annotations

import itertools
import time

import pytest
from onnx import helper

from planner.ir.graph import load_graph
from planner.memory.liveness import lifetimes, order_lower_bound
from planner.order import optimize_order
from planner.order.floor import _Cuts, fewest_live_bytes, keep_everything_floor
from planner.order.heuristics import QUICK_ORDERS
from tests.support.fixture_zoo import model_path
from tests.support.onnx_builders import make_model, random_dag, value


def topological_orders(graph):
    """Every topological order of a small graph."""
    for order in itertools.permutations(range(len(graph.ops))):
        position = {op: k for k, op in enumerate(order)}
        if all(position[graph.tensors[t].producer] < position[op.id]
               for op in graph.ops for t in op.input_ids
               if graph.tensors[t].producer is not None):
            yield order


def test_no_order_goes_below_the_floor_and_the_best_often_meets_it():
    met = 0
    for seed in range(8):
        graph = load_graph(random_dag(seed, n_ops=7))
        best = min(lifetimes(graph, order).peak for order in topological_orders(graph))
        floor = keep_everything_floor(graph).bytes
        assert order_lower_bound(graph) <= floor <= best, seed
        met += floor == best
    assert met >= 4  # the cut at each op is that op's best case alone: a floor, not a peak


@pytest.mark.parametrize("name,optimization", [
    ("mlp_sgd", "disable"), ("gpt2_tiny_adam", "disable"), ("resnet_cifar", "disable"),
    ("cnn_bn_momentum", "extended"), ("mlp_sgd", "extended")])
def test_no_op_of_any_quick_order_holds_fewer_bytes_than_its_cut(name, optimization):
    """Each op's cut is a floor for that op in every order: checked at every step of every
    quick order (ONNX Runtime's rewrite of cnn_bn_momentum reads BatchNorm parameters through
    views, which are in the state's bytes, not transient ones)."""
    graph = load_graph(model_path(name), optimization=optimization)
    cuts = _Cuts(graph)
    at = {op.id: cuts.at(op.id)[0] + cuts.persistent for op in graph.ops}
    for make in QUICK_ORDERS.values():
        order = make(graph)
        if order is None:
            continue
        live = lifetimes(graph, order).live_bytes
        assert all(at[op] <= live[k] for k, op in enumerate(order))
    floor = keep_everything_floor(graph)  # ranked by the file order's bytes
    assert floor.exact and floor.bytes == max(max(at.values()), order_lower_bound(graph))
    assert floor.bytes > floor.persistent
    orders = [order for make in QUICK_ORDERS.values() if (order := make(graph)) is not None]
    upper = fewest_live_bytes(graph, [(o, lifetimes(graph, o).live_bytes) for o in orders])
    ranked = keep_everything_floor(graph, upper)
    assert ranked.exact and ranked.bytes == floor.bytes and ranked.cuts <= floor.cuts


def test_a_search_cut_short_still_gives_a_floor():
    graph = load_graph(model_path("resnet_cifar"))
    exact = keep_everything_floor(graph)
    short = keep_everything_floor(graph, deadline=time.perf_counter())
    assert exact.exact and exact.cuts > 1
    assert not short.exact and short.cuts == 1
    assert order_lower_bound(graph) <= short.bytes <= exact.bytes


def test_ordering_reports_the_floor_as_its_bound():
    graph = load_graph(model_path("resnet_cifar"))
    result = optimize_order(graph, use_solver=False)
    floor = keep_everything_floor(graph)
    assert order_lower_bound(graph) < floor.bytes == result.lower_bound_bytes
    assert result.gap == (result.peak_bytes - floor.bytes) / floor.bytes
    assert result.report().bound == floor.bytes


def test_an_order_that_meets_the_floor_is_optimal():
    """A skip connection over a chain of ops that cannot run in place: the one order meets the
    floor (the skipped value, the chain op's input and its output), which is above the
    op-footprint bound, so ordering stops at the bound instead of searching for the time
    limit. (mlp_sgd's extended graph was the case until its SGD updates were fused: its best
    order is now 1 B above the floor, which counts its empty initializer as a byte.)"""
    nodes = [helper.make_node("Cos", ["x"], ["a"]), helper.make_node("Cos", ["a"], ["b"]),
             helper.make_node("Cos", ["b"], ["c"]), helper.make_node("Add", ["a", "c"], ["d"])]
    graph = load_graph(make_model(nodes, [value("x", [256])], [value("d", [256])]))
    result = optimize_order(graph, time_limit=30)
    assert result.lower_bound_bytes > order_lower_bound(graph)
    assert result.stopped == "bound" and result.status == "OPTIMAL" and result.gap == 0


def test_the_mlp_floor_is_its_weight_transposed_twice():
    """mlp_sgd as exported transposes fc2's 16 KiB weight in the forward pass and back again
    for the backward: both copies are live at once, on top of the state and the input."""
    graph = load_graph(model_path("mlp_sgd"))
    floor = keep_everything_floor(graph)
    names = {graph.tensors[t].name for t in floor.live}
    assert {"permute_1", "permute_7"} <= names
    assert floor.bytes == floor.persistent + sum(floor.live.values())
