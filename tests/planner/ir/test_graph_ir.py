"""IR invariants on every fixture training graph, and agreement with the exporter's ground truth.

The exporter knows which graph input is a parameter, a buffer or optimizer state and which output
updates it (the sidecar); the IR must find the same facts from the dataflow alone.
"""

from __future__ import annotations

import json

import pytest

from arenaplan.cli import main
from planner.ir.graph import Region, TensorRole, load_graph
from tests.support.fixture_zoo import REQUIRED, fixture_names, model_path, sidecar

NAMES = fixture_names()


def test_the_zoo_has_every_required_fixture():
    assert set(REQUIRED) <= set(NAMES)


@pytest.fixture(scope="module", params=NAMES)
def loaded(request):
    return request.param, load_graph(model_path(request.param)), sidecar(request.param)


def test_every_tensor_is_sized_and_typed(loaded):
    _, graph, _ = loaded
    for t in graph.tensors:
        assert t.nbytes == t.numel * {"float32": 4, "int64": 8, "bool": 1, "int32": 4,
                                       "float64": 8, "float16": 2, "uint8": 1, "int8": 1}[t.dtype]


def test_ops_read_only_what_was_produced_before_them(loaded):
    _, graph, _ = loaded
    for op in graph.ops:
        for t in op.input_ids:
            producer = graph.tensors[t].producer
            assert producer is None or producer < op.id
            assert op.id in graph.tensors[t].consumers
        for t in op.output_ids:
            assert graph.tensors[t].producer == op.id


def test_roles_match_the_exporter(loaded):
    _, graph, meta = loaded
    for name, info in meta["inputs"].items():
        assert graph.tensor(name).role.value == info["kind"], name
    for state, new in meta["updates"].items():
        assert graph.tensor(state).updated_by == graph.tensor(new).id, state
        assert graph.tensor(new).updates == graph.tensor(state).id
    assert graph.tensors[graph.loss].name == meta["loss_output"]
    assert all(t.role in TensorRole for t in graph.tensors)


def test_parameter_count_equals_torch(loaded):
    _, graph, meta = loaded
    assert graph.parameter_count() == meta["torch_parameter_count"]


def test_training_graphs_have_all_three_regions(loaded):
    _, graph, meta = loaded
    assert {op.region for op in graph.ops} == set(Region)
    assert len(graph.ops) == meta["op_count"]
    # The loss is computed in the forward region; gradients in the backward region.
    assert graph.ops[graph.tensors[graph.loss].producer].region is Region.FORWARD
    assert graph.tensors_with_role(TensorRole.GRADIENT)
    assert graph.tensors_with_role(TensorRole.ACTIVATION)


@pytest.mark.parametrize("name", NAMES)
def test_inspect_prints_a_summary(name, capsys):
    assert main(["inspect", str(model_path(name))]) == 0
    line = capsys.readouterr().out
    assert f"{sidecar(name)['op_count']} ops" in line
    assert main(["inspect", str(model_path(name)), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["parameters"] == sidecar(name)["torch_parameter_count"]
    assert summary["activation_bytes"] > 0
