"""Node-link JSON graphs (planner.ir.graph_json): what they become, and every way one can be
unusable refused with InvalidInputError naming the problem."""

from __future__ import annotations

import json
import random

import pytest

from planner.errors import InvalidInputError
from planner.ir.graph import Region, TensorRole
from planner.ir.graph_json import graph_from_node_link, read_graph_json
from tests.support.chains import chain_json


def _op(node_id, **fields):
    return {"id": node_id, "cost_cpu": 1, "cost_ram": 4, **fields}


def test_a_listing_out_of_dataflow_order_is_sorted_ties_by_listing():
    data = {"nodes": [_op("c"), _op("b", backward=True), {"id": "x", "input": True,
                                                          "cost_ram": 2}, _op("a")],
            "links": [{"source": "x", "target": "a"}, {"source": "a", "target": "c"},
                      {"source": "x", "target": "b"}, {"source": "b", "target": "c"},
                      {"source": "x", "target": "a"}]}
    graph, profile = graph_from_node_link(data)
    assert [t.name for t in graph.tensors] == ["nx", "nb", "na", "nc"]
    assert [op.name for op in graph.ops] == ["nb", "na", "nc"]
    assert graph.tensors[0].consumers == (0, 1) and graph.tensors[0].role is TensorRole.DATA
    assert [op.inputs for op in graph.ops] == [(0,), (0,), (2, 1)]  # a duplicate link is one
    assert graph.ops[0].region is Region.BACKWARD and graph.tensors[1].role is TensorRole.GRADIENT
    assert graph.inputs == (0,) and graph.outputs == (3,)
    assert graph.tensors[3].role is TensorRole.OUTPUT
    assert [p.op_id for p in profile.ops] == [0, 1, 2] and profile.devices == ["cpu"]


def test_user_costs_on_more_devices_and_whole_float_sizes():
    data = {"nodes": [_op(1, cost_ram=8.0, costs={"cuda:0": 0.5}, name="conv", op="Conv")],
            "edges": []}
    graph, profile = graph_from_node_link(data)
    assert graph.tensors[0].nbytes == 8 and graph.tensors[0].shape == (8,)
    assert graph.ops[0].op_type == "Conv" and graph.ops[0].name == "conv"
    assert profile.devices == ["cpu", "cuda:0"]
    costs = profile.ops[0].costs
    assert (costs["cpu"].median_seconds, costs["cuda:0"].median_seconds) == (1.0, 0.5)
    assert costs["cpu"].source == "user" and profile.ops[0].unsupported == {}


def test_the_model_sha256_names_the_graph_not_its_formatting(tmp_path):
    """Plan ids include it: the same graph must keep the same sha256 across releases."""
    data = chain_json(random.Random(3), 50)
    path = tmp_path / "chain.json"
    path.write_text(json.dumps(data, indent=2))
    graph, profile = read_graph_json(path)
    assert graph.model_sha256 == profile.model_sha256 == (
        "b52c460aa861324b051ccf5e2e5dd79bad599a7a2dbe31137823bdabd52d70bf")
    reordered = {"links": data["links"],
                 "nodes": [dict(reversed(node.items())) for node in data["nodes"]]}
    assert graph_from_node_link(reordered)[0].model_sha256 == graph.model_sha256


@pytest.mark.parametrize(("data", "message"), [
    ({"links": []}, "needs a 'nodes' list"),
    ({"nodes": [], "links": {}}, "must be a list"),
    ({"nodes": [{"cost_ram": 1}]}, "every node needs an 'id'"),
    ({"nodes": [_op(1), _op(1)]}, "appears twice"),
    ({"nodes": [_op(1)], "links": [{"source": 1}]}, "needs 'source' and 'target'"),
    ({"nodes": [_op(1)], "links": [[1, 1]]}, "needs 'source' and 'target'"),
    ({"nodes": [_op(1)], "links": [{"source": 1, "target": 2}]}, "names an unknown node"),
    ({"nodes": [_op(1), _op(2)], "links": [{"source": 1, "target": 2},
                                          {"source": 2, "target": 1}]}, "has a cycle"),
    ({"nodes": [_op(1), {"id": 2, "input": True, "cost_ram": 1}],
      "links": [{"source": 1, "target": 2}]}, "input node 2 has predecessors"),
    ({"nodes": [_op(1, name="a"), _op(2, name="a")]}, "names must be unique"),
    ({"nodes": [_op(1, cost_cpu=-1)]}, "'cost_cpu' must be a number >= 0"),
    ({"nodes": [_op(1, cost_cpu=float("nan"))]}, "'cost_cpu' must be a number >= 0"),
    ({"nodes": [_op(1, cost_cpu=True)]}, "'cost_cpu' must be a number >= 0"),
    ({"nodes": [{"id": 1}]}, "'cost_ram' must be a number >= 0"),
    ({"nodes": [_op(1, cost_ram=float("nan"))]}, "'cost_ram' must be a number >= 0"),
    ({"nodes": [_op(1, cost_ram=2.5)]}, "'cost_ram' is a whole number of bytes"),
    ({"nodes": [_op(1, cost_ram=float("inf"))]}, "'cost_ram' is a whole number of bytes"),
    ({"nodes": [_op(1, costs=[1])]}, "'costs' maps devices to seconds"),
    ({"nodes": [_op(1, costs={"tpu": 1})]}, "node 1: "),
    ({"nodes": [_op(1, costs={"cuda:0": float("nan")})]}, "cost on cuda:0 must be >= 0"),
])
def test_unusable_graphs_are_refused_saying_why(data, message):
    with pytest.raises(InvalidInputError, match=message):
        graph_from_node_link(data)


def test_a_file_that_is_missing_or_not_json(tmp_path):
    with pytest.raises(InvalidInputError, match="not found"):
        read_graph_json(tmp_path / "nope.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(InvalidInputError, match="is not JSON"):
        read_graph_json(tmp_path / "bad.json")
