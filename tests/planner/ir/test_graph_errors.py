"""Every way a model can be unusable gets its own typed error and a message saying what to do."""

from __future__ import annotations

import re

import pytest
from onnx import TensorProto, helper

from arenaplan.cli import main
from planner.errors import (
    ExternalDataError,
    GraphCycleError,
    ModelCheckError,
    NotOnnxError,
    UnknownShapeError,
    UnsupportedOperatorError,
    UnsupportedVersionError,
)
from planner.ir.graph import load_graph
from tests.support.onnx_builders import (
    calling_local_functions,
    make_model,
    negative_dim_input,
    no_nodes,
    relu_chain,
    tiny_momentum_step,
    value,
)


@pytest.mark.parametrize("data", [b"", b"hello, I am not a model", bytes(range(256)) * 4])
def test_bytes_that_are_not_onnx(data):
    with pytest.raises(NotOnnxError, match="not an ONNX model|empty"):
        load_graph(data)


def test_missing_file(tmp_path):
    with pytest.raises(NotOnnxError, match="not found"):
        load_graph(tmp_path / "nope.onnx")


def test_checker_failure_names_the_problem():
    model = make_model(
        [helper.make_node("Relu", ["undefined"], ["y"])], [value("x", [2])], [value("y", [2])]
    )
    with pytest.raises(ModelCheckError, match="ONNX checker.*undefined"):
        load_graph(model)


def test_cycle_is_named():
    model = make_model(
        [
            helper.make_node("Add", ["x", "b"], ["a"], name="first"),
            helper.make_node("Relu", ["a"], ["b"], name="second"),
        ],
        [value("x", [2])],
        [value("b", [2])],
    )
    with pytest.raises(GraphCycleError, match="cycle.*(first|second)"):
        load_graph(model)


def test_acyclic_but_unsorted_graph_is_sorted():
    model = relu_chain(3)
    nodes = list(model.graph.node)
    del model.graph.node[:]
    model.graph.node.extend(reversed(nodes))
    graph = load_graph(model)
    for op in graph.ops:
        for t in op.input_ids:
            producer = graph.tensors[t].producer
            assert producer is None or producer < op.id


def test_external_data_is_refused_without_reading():
    model = relu_chain()
    init = helper.make_tensor("w", TensorProto.FLOAT, [2, 2], [0.0] * 4)
    init.ClearField("float_data")
    init.data_location = TensorProto.EXTERNAL
    entry = init.external_data.add()
    entry.key, entry.value = "location", "/etc/passwd"
    model.graph.initializer.append(init)
    with pytest.raises(ExternalDataError, match="'w'.*external"):
        load_graph(model)


@pytest.mark.parametrize("op_type", ["If", "Loop", "Scan"])
def test_control_flow_is_not_supported_yet(op_type):
    body = helper.make_graph([], "body", [], [])
    node = helper.make_node(op_type, ["x"], ["y"], body=body)
    model = make_model([node], [value("x", [2])], [value("y", [2])])
    with pytest.raises(UnsupportedOperatorError, match="control-flow.*not supported yet"):
        load_graph(model)


def test_foreign_domain_is_refused():
    node = helper.make_node("FusedGemm", ["x"], ["y"], domain="com.microsoft")
    model = make_model([node], [value("x", [2])], [value("y", [2])])
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    with pytest.raises(UnsupportedOperatorError, match="com.microsoft"):
        load_graph(model)


@pytest.mark.parametrize(
    ("ir_version", "opset", "pattern"),
    [(3, 17, "IR version 3.*4..13"), (14, 17, "IR version 14"), (10, 11, "opset 11.*13..25"),
     (10, 26, "opset 26")],
)
def test_unsupported_versions_give_the_range(ir_version, opset, pattern):
    model = relu_chain()
    model.ir_version = ir_version
    model.opset_import[0].version = opset
    with pytest.raises(UnsupportedVersionError, match=pattern):
        load_graph(model)


def test_unbound_symbolic_dim_names_tensor_and_dim():
    with pytest.raises(UnknownShapeError, match=r"tensor 'x'.*'batch'.*--dim batch=N"):
        load_graph(tiny_momentum_step())


def test_binding_a_dim_the_model_lacks_lists_the_real_ones():
    with pytest.raises(UnknownShapeError, match="'btch'.*symbolic dims are: batch"):
        load_graph(tiny_momentum_step(), dims={"btch": 4})


def test_bound_dims_give_exact_sizes():
    graph = load_graph(tiny_momentum_step(), dims={"batch": 5})
    assert graph.tensor("x").shape == (5, 3)
    assert graph.tensor("x").nbytes == 5 * 3 * 4
    assert graph.tensor("y").nbytes == 5 * 4 * 4


def test_unknown_dim_without_name():
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [value("x", [None, 2])],
                       [value("y", [None, 2])])
    with pytest.raises(UnknownShapeError, match="tensor 'x'.*unknown dim"):
        load_graph(model)


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda p: p.write_bytes(b"garbage"), "not an ONNX model"),
        (lambda p: p.write_bytes(tiny_momentum_step().SerializeToString()), "--dim batch=N"),
    ],
)
def test_cli_reports_bad_models_with_exit_code_2(tmp_path, capsys, setup, message):
    path = tmp_path / "m.onnx"
    setup(path)
    assert main(["inspect", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


@pytest.mark.parametrize(("model", "error", "message"), [
    (calling_local_functions("f"), GraphCycleError, "local::f -> local::f"),
    (calling_local_functions("f", "g"), GraphCycleError, "local::f -> local::g -> local::f"),
    (negative_dim_input(), UnknownShapeError, "input 'x' has dimension -3 at axis 0"),
    (no_nodes(), ModelCheckError, "no nodes"),
])
def test_recursion_negative_dims_and_empty_graphs_are_model_errors(model, error, message):
    """Issue 15, F5: each used to escape as a non-arenaplan error (a 409 "bug" in the service)
    or to load and fail later in the planner."""
    with pytest.raises(error, match=re.escape(message)):
        load_graph(model.SerializeToString())
