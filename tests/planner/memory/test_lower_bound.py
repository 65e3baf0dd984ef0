"""The op-footprint bound (planner.memory.liveness.order_lower_bound): each storage counted once
per group of values needed together, exact for any size, and unchanged on the fixtures."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

from planner.ir.graph import load_graph
from planner.ir.graph_json import graph_from_node_link
from planner.memory.liveness import order_lower_bound
from tests.support.fixture_zoo import model_path
from tests.support.onnx_builders import make_model, value

N = 1024  # floats per activation: 4 KiB


def test_an_op_reading_a_value_and_its_view_counts_the_storage_once():
    nodes = [helper.make_node("Relu", ["x"], ["a"]),
             helper.make_node("Reshape", ["a", "s"], ["r"]),
             helper.make_node("Concat", ["a", "r"], ["c"], axis=0),
             helper.make_node("ReduceSum", ["c"], ["loss"], keepdims=0)]
    shape = numpy_helper.from_array(np.array([N], dtype=np.int64), "s")
    graph = load_graph(make_model(nodes, [value("x", [N])], [value("loss", [])], [shape]))
    shape_bytes = 8  # the Reshape's shape constant, held for the whole step
    # Concat needs a (its view r adds nothing) and its output c of 2N floats at once
    assert order_lower_bound(graph) == shape_bytes + 4 * N + 8 * N


def test_sizes_past_64_bits_are_summed_exactly():
    big = 10**20
    graph, _ = graph_from_node_link({
        "nodes": [{"id": 0, "input": True, "cost_ram": big},
                  {"id": 1, "cost_cpu": 1, "cost_ram": 3 * big},
                  {"id": 2, "cost_cpu": 1, "cost_ram": 2 * big}],
        "links": [{"source": 0, "target": 1}, {"source": 1, "target": 2}]})
    assert order_lower_bound(graph) == 5 * big


@pytest.mark.parametrize(("name", "bound"), [("cnn_bn_momentum", 276_132),
                                             ("gpt2_tiny_adam", 415_100)])
def test_the_fixtures_keep_their_bounds(name, bound):
    """Batch-norm state, views and Adam's in-place update chains: the values the per-op
    computation gave before it was vectorized."""
    assert order_lower_bound(load_graph(model_path(name))) == bound
