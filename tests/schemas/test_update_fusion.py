"""schemas.update_fusion: a weight gradient's matrix product folded into its SGD update, checked
on one-update models run by ONNX Runtime before and after the rewrite, and the shapes it must
leave alone."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from schemas.update_fusion import fuse_sgd_updates

F = TensorProto.FLOAT
BATCH, FAN_IN, FAN_OUT = 16, 24, 40


def update_model(update: str = "Sub", scale: str = "initializer", product: str = "Gemm",
                 extra_reader: bool = False, weight_is_factor: bool = False) -> bytes:
    """`w.updated = update(w, lr * (x^T @ g))`: x [BATCH, FAN_IN], g [BATCH, FAN_OUT] (all
    three BATCH when the update reads x in w's place)."""
    fan_in, fan_out = (BATCH, BATCH) if weight_is_factor else (FAN_IN, FAN_OUT)
    nodes = []
    if product == "Gemm":
        nodes.append(helper.make_node("Gemm", ["x", "g"], ["p"], transA=1))
    else:  # a batched MatMul, which Gemm cannot take
        nodes += [helper.make_node("Transpose", ["x3"], ["xt"], perm=[0, 2, 1]),
                  helper.make_node("MatMul", ["xt", "g3"], ["p3"]),
                  helper.make_node("ReduceSum", ["p3", "axis0"], ["p"], keepdims=0)]
    nodes.append(helper.make_node("Mul", ["p", "lr"], ["s"]))
    weight = "x" if weight_is_factor else "w"
    args = [weight, "s"] if update == "Sub" else ["s", weight]
    nodes.append(helper.make_node(update, args, ["w.updated"]))
    outputs = [helper.make_tensor_value_info("w.updated", F, [fan_in, fan_out])]
    if extra_reader:
        nodes.append(helper.make_node("Neg", ["p"], ["p.neg"]))
        outputs.append(helper.make_tensor_value_info("p.neg", F, [fan_in, fan_out]))
    inputs = [helper.make_tensor_value_info("w", F, [fan_in, fan_out]),
              helper.make_tensor_value_info("x", F, [BATCH, fan_in]),
              helper.make_tensor_value_info("g", F, [BATCH, fan_out])]
    initializers = [numpy_helper.from_array(np.array([0], np.int64), "axis0")]
    if product != "Gemm":
        inputs += [helper.make_tensor_value_info("x3", F, [2, BATCH, fan_in]),
                   helper.make_tensor_value_info("g3", F, [2, BATCH, fan_out])]
    if scale == "initializer":
        initializers.append(numpy_helper.from_array(np.array(0.05, np.float32), "lr"))
    else:
        inputs.append(helper.make_tensor_value_info("lr", F, []))
    graph = helper.make_graph(nodes, "sgd", inputs, outputs, initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return onnx.shape_inference.infer_shapes(model).SerializeToString()


def feeds(model: bytes) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    session = ort.InferenceSession(model)
    return {i.name: rng.standard_normal([d for d in i.shape]).astype(np.float32)
            for i in session.get_inputs()}


def run(model: bytes, values: dict[str, np.ndarray]) -> np.ndarray:
    session = ort.InferenceSession(model)
    names = {i.name for i in session.get_inputs()}
    return session.run(["w.updated"], {k: v for k, v in values.items() if k in names})[0]


@pytest.mark.parametrize("update", ["Sub", "Add"])
def test_the_update_becomes_one_gemm_over_the_weight(update):
    before = update_model(update)
    after = fuse_sgd_updates(before)
    graph = onnx.load_from_string(after).graph
    assert [n.op_type for n in graph.node] == ["Gemm"]
    gemm = graph.node[0]
    attrs = {a.name: helper.get_attribute_value(a) for a in gemm.attribute}
    assert list(gemm.input) == ["x", "g", "w"] and list(gemm.output) == ["w.updated"]
    assert attrs["alpha"] == pytest.approx(-0.05 if update == "Sub" else 0.05)
    assert attrs["beta"] == 1.0 and attrs["transA"] == 1
    assert "lr" not in {i.name for i in graph.initializer}  # no reader left
    values = feeds(before)
    np.testing.assert_allclose(run(after, values), run(before, values), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("case", [
    {"extra_reader": True},  # the gradient itself is wanted: it must exist
    {"scale": "input"},  # a learning rate fed at run time cannot be an attribute
    {"product": "batched"},  # not a rank-2 product
    {"weight_is_factor": True, "update": "Add"},  # Gemm would write over a factor it reads
])
def test_what_cannot_be_fused_is_left_byte_for_byte(case):
    before = update_model(**case)
    assert fuse_sgd_updates(before) == before
