"""schemas.loss_fusion: the cross-entropy gradient written over the softmax instead of beside a
one-hot matrix, checked bit for bit on models run by ONNX Runtime before and after the rewrite,
on the shapes it must leave alone, and on what it takes out of the keep-everything floor."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from planner.ir.graph import load_graph
from planner.order.floor import keep_everything_floor
from schemas.loss_fusion import fuse_cross_entropy_gradients

F = TensorProto.FLOAT
ROWS, CLASSES = 16, 37
IGNORED_ROWS = (3, 11)  # rows whose loss scale is 0, as an ignore_index label gives


def gradient_model(*, zeros: str = "expand", scale: str = "after", row_sum: str = "axis",
                   opset: int = 17, picks_per_row: int = 1, fill: float = 0.0,
                   extra_reader: bool = False) -> bytes:
    """`grad = (w * onehot) - exp(logp) * rowsum(w * onehot)`, the cross-entropy backward torch
    exports: logp [ROWS, CLASSES], label [ROWS, picks_per_row], w [ROWS, 1]."""
    shape = [ROWS, CLASSES]
    nodes, initializers = [], [
        numpy_helper.from_array(np.array(fill, np.float32), "fill"),
        numpy_helper.from_array(np.array(shape, np.int64), "shape"),
        numpy_helper.from_array(np.array([1] if row_sum == "axis" else [0, 1], np.int64), "axes"),
    ]
    if zeros == "expand":
        nodes.append(helper.make_node("Expand", ["fill", "shape"], ["zeros"]))
    elif zeros == "constant":
        nodes.append(helper.make_node("ConstantOfShape", ["shape"], ["zeros"],
                                      value=helper.make_tensor("v", F, [1], [fill])))
    else:
        initializers.append(numpy_helper.from_array(np.full(shape, fill, np.float32), "zeros"))
    nodes.append(helper.make_node("ConstantOfShape", ["row_shape"], ["minus_one"],
                                  value=helper.make_tensor("v", F, [1], [-1.0])))
    initializers.append(numpy_helper.from_array(np.array([ROWS, picks_per_row], np.int64),
                                                "row_shape"))
    nodes.append(helper.make_node("ScatterElements", ["zeros", "label", "minus_one"],
                                  ["onehot"], axis=1))
    scaled = "onehot"
    if scale != "none":
        scaled = "scaled"
        args = ["onehot", "w"] if scale == "after" else ["w", "onehot"]
        nodes.append(helper.make_node("Mul", args, ["scaled"]))
    nodes += [
        helper.make_node("ReduceSum", [scaled, "axes"], ["rowsum"], keepdims=1),
        helper.make_node("Exp", ["logp"], ["softmax"]),
        helper.make_node("Mul", ["softmax", "rowsum"], ["softmax_scaled"]),
        helper.make_node("Sub", [scaled, "softmax_scaled"], ["grad"]),
    ]
    outputs = [helper.make_tensor_value_info("grad", F, shape)]
    if extra_reader:
        nodes.append(helper.make_node("Neg", [scaled], ["also"]))
        outputs.append(helper.make_tensor_value_info("also", F, shape))
    inputs = [helper.make_tensor_value_info("logp", F, shape),
              helper.make_tensor_value_info("label", TensorProto.INT64, [ROWS, picks_per_row]),
              helper.make_tensor_value_info("w", F, [ROWS, 1])]
    graph = helper.make_graph(nodes, "ce", inputs, outputs, initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              ir_version=8)
    return onnx.shape_inference.infer_shapes(model).SerializeToString()


def feeds() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(5)
    logits = rng.standard_normal((ROWS, CLASSES)).astype(np.float32) * 4
    logp = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    w = np.full((ROWS, 1), 1 / (ROWS - len(IGNORED_ROWS)), np.float32)
    w[list(IGNORED_ROWS)] = 0
    return {"logp": logp.astype(np.float32),
            "label": rng.integers(0, CLASSES, (ROWS, 1)).astype(np.int64), "w": w}


def run(model: bytes, values: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    return session.run(None, values)


def op_types(model: bytes) -> list[str]:
    return [n.op_type for n in onnx.load_from_string(model).graph.node]


@pytest.mark.parametrize("zeros", ["expand", "constant", "initializer"])
@pytest.mark.parametrize("scale", ["after", "before", "none"])
def test_the_gradient_is_scattered_into_the_negated_softmax_bit_for_bit(zeros, scale):
    before = gradient_model(zeros=zeros, scale=scale)
    after = fuse_cross_entropy_gradients(before)
    kinds = op_types(after)
    assert "Expand" not in kinds and kinds.count("ScatterElements") == 1
    scatter = next(n for n in onnx.load_from_string(after).graph.node
                   if n.op_type == "ScatterElements")
    attributes = {a.name: helper.get_attribute_value(a) for a in scatter.attribute}
    assert attributes["reduction"] == b"add" and list(scatter.output) == ["grad"]
    values = feeds()
    expected, got = run(before, values)[0], run(after, values)[0]
    assert np.array_equal(expected, got)  # equal values; only an exact zero may change sign


def test_the_rewrite_reads_no_logits_sized_value_besides_the_softmax():
    graph = onnx.load_from_string(fuse_cross_entropy_gradients(gradient_model())).graph
    inferred = onnx.shape_inference.infer_shapes(onnx.helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)).graph
    big = {v.name for v in (*inferred.value_info, *inferred.output, *inferred.input)
           if [d.dim_value for d in v.type.tensor_type.shape.dim] == [ROWS, CLASSES]}
    assert big == {"logp", "softmax", "softmax_scaled", "grad/negated", "grad"}


@pytest.mark.parametrize("change", [
    {"opset": 15},  # no ScatterElements reduction before opset 16
    {"extra_reader": True},  # the one-hot is needed elsewhere
    {"row_sum": "all"},  # a sum over every element is not the row value
    {"picks_per_row": 2},  # two indices per row may coincide
    {"fill": 0.5},  # not a one-hot over zeros
])
def test_shapes_it_cannot_fuse_exactly_are_left_byte_for_byte(change):
    model = gradient_model(**change)
    assert fuse_cross_entropy_gradients(model) == model


def test_the_fused_gradient_takes_one_logits_sized_buffer_out_of_the_floor():
    """A whole step: logits = x @ W, log-softmax, the loss, its gradient and the update of W;
    before, two logits-sized buffers are live together (the softmax and the one-hot) wherever
    the ops go; after, one."""
    rows, classes, features = 64, 400, 8
    shape = [rows, classes]
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["logits"]),
        helper.make_node("LogSoftmax", ["logits"], ["logp"], axis=1),
        helper.make_node("GatherElements", ["logp", "label"], ["picked"], axis=1),
        helper.make_node("ReduceMean", ["picked"], ["loss"], keepdims=0),
        helper.make_node("Expand", ["zero", "shape"], ["zeros"]),
        helper.make_node("ScatterElements", ["zeros", "label", "minus"], ["onehot"], axis=1),
        helper.make_node("Mul", ["onehot", "w"], ["scaled"]),
        helper.make_node("ReduceSum", ["scaled", "axis1"], ["rowsum"], keepdims=1),
        helper.make_node("Exp", ["logp"], ["softmax"]),
        helper.make_node("Mul", ["softmax", "rowsum"], ["softmax_scaled"]),
        helper.make_node("Sub", ["scaled", "softmax_scaled"], ["grad"]),
        helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0]),
        helper.make_node("MatMul", ["xt", "grad"], ["dW"]),
        helper.make_node("Mul", ["dW", "lr"], ["step"]),
        helper.make_node("Sub", ["W", "step"], ["W.updated"]),
    ]
    initializers = [
        numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
        numpy_helper.from_array(np.array(shape, np.int64), "shape"),
        numpy_helper.from_array(np.full((rows, 1), -1.0, np.float32), "minus"),
        numpy_helper.from_array(np.full((rows, 1), 1 / rows, np.float32), "w"),
        numpy_helper.from_array(np.array([1], np.int64), "axis1"),
        numpy_helper.from_array(np.array(0.1, np.float32), "lr"),
    ]
    graph = helper.make_graph(
        nodes, "step",
        [helper.make_tensor_value_info("x", F, [rows, features]),
         helper.make_tensor_value_info("label", TensorProto.INT64, [rows, 1]),
         helper.make_tensor_value_info("W", F, [features, classes])],
        [helper.make_tensor_value_info("loss", F, []),
         helper.make_tensor_value_info("W.updated", F, [features, classes])],
        initializers)
    model = onnx.shape_inference.infer_shapes(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)).SerializeToString()
    fused = fuse_cross_entropy_gradients(model)
    assert fused != model
    logits_bytes = rows * classes * 4
    before = keep_everything_floor(load_graph(model)).bytes
    after = keep_everything_floor(load_graph(fused)).bytes
    assert before >= 2 * logits_bytes > after
