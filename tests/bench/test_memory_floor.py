"""The keep-everything floor of bench/memory/floor.py: no order goes below it, and on small
graphs the best order meets it."""

from __future__ import annotations

import itertools

import pytest

from bench.memory.floor import keep_everything_floor
from planner.ir.graph import load_graph
from planner.memory.liveness import lifetimes, order_lower_bound
from planner.order.heuristics import QUICK_ORDERS
from tests.support.fixture_zoo import model_path
from tests.support.onnx_builders import random_dag


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


@pytest.mark.parametrize("name", ["mlp_sgd", "gpt2_tiny_adam", "resnet_cifar"])
def test_no_quick_order_goes_below_the_floor(name):
    graph = load_graph(model_path(name))
    orders = [make(graph) for make in QUICK_ORDERS.values()]
    floor = keep_everything_floor(graph, orders[0])
    assert floor.bytes <= min(lifetimes(graph, order).peak for order in orders)
    assert floor.bytes > floor.persistent


def test_the_mlp_floor_is_its_weight_transposed_twice():
    """mlp_sgd as exported transposes fc2's 16 KiB weight in the forward pass and back again
    for the backward: both copies are live at once, on top of the state and the input."""
    graph = load_graph(model_path("mlp_sgd"))
    floor = keep_everything_floor(graph)
    names = {graph.tensors[t].name for t in floor.live}
    assert {"permute_1", "permute_7"} <= names
    assert floor.bytes == floor.persistent + sum(floor.live.values())
