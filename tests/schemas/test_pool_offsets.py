"""schemas.pool_offsets: the 1x1 MaxPool torch's export runs to learn each plane's flat index
offset, replaced by those offsets as a constant; checked bit for bit against ONNX Runtime on the
pattern as torch exports it, on the shapes it must leave alone, and on the op-footprint bound."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from planner.ir.graph import load_graph
from planner.memory.liveness import order_lower_bound
from schemas.pool_offsets import fold_pool_offsets

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def pool_model(spatial: tuple[int, ...] = (6, 4), *, unit: dict | None = None,
               ends: int = 1, values_read: bool = False, offsets_output: bool = False) -> bytes:
    """`indices - offsets` of a 2-wide max pool, the offsets from a 1x1 MaxPool and a Slice, as
    torch.onnx exports max_pool with indices; X [2, 3, *spatial]."""
    shape = [2, 3, *spatial]
    rank = len(shape)
    axes = list(range(2, rank))
    unit_attrs = {"kernel_shape": [1] * len(spatial), "strides": [1] * len(spatial),
                  **(unit or {})}
    nodes = [
        helper.make_node("MaxPool", ["x"], ["pooled", "flat"], kernel_shape=[2] * len(spatial),
                         strides=[2] * len(spatial)),
        helper.make_node("MaxPool", ["x"], ["copy", "all"], **unit_attrs),
        helper.make_node("Slice", ["all", "starts", "ends", "axes"], ["offsets"]),
        helper.make_node("Sub", ["flat", "offsets"], ["indices"]),
    ]
    outputs = [helper.make_tensor_value_info("pooled", F, None),
               helper.make_tensor_value_info("indices", I64, None)]
    if values_read:
        nodes.append(helper.make_node("Neg", ["copy"], ["copy_neg"]))
        outputs.append(helper.make_tensor_value_info("copy_neg", F, None))
    if offsets_output:
        outputs.append(helper.make_tensor_value_info("offsets", I64, None))
    initializers = [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
                    (("starts", [0] * len(axes)), ("ends", [ends] * len(axes)), ("axes", axes))]
    graph = helper.make_graph(nodes, "pool", [helper.make_tensor_value_info("x", F, shape)],
                              outputs, initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return onnx.shape_inference.infer_shapes(model).SerializeToString()


def run(model: bytes, x: np.ndarray) -> list[np.ndarray]:
    return ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})


@pytest.mark.parametrize("spatial", [(6, 4), (8,)], ids=["2d", "1d"])
def test_the_offsets_become_a_constant_and_every_result_stays_bit_identical(spatial):
    before = pool_model(spatial)
    after = fold_pool_offsets(before)
    graph = onnx.load_from_string(after).graph
    assert [n.op_type for n in graph.node] == ["MaxPool", "Sub"]
    constant = next(i for i in graph.initializer if i.name.endswith("/plane_offsets"))
    assert list(constant.dims) == [2, 3, *[1] * len(spatial)]
    assert {i.name for i in graph.initializer} == {constant.name}  # the Slice's inputs are gone
    x = np.random.default_rng(1).standard_normal((2, 3, *spatial)).astype(np.float32)
    for expected, got in zip(run(before, x), run(after, x), strict=True):
        assert expected.dtype == got.dtype and np.array_equal(expected, got)


@pytest.mark.parametrize("change", [
    {"unit": {"kernel_shape": [2, 2]}},  # a real pool, not the offsets
    {"unit": {"strides": [2, 2]}},
    {"unit": {"storage_order": 1}},  # column-major indices: other offsets
    {"unit": {"pads": [1, 1, 1, 1]}},
    {"ends": 2},  # more than each plane's first element
    {"values_read": True},  # the 1x1 pool's values are used
    {"offsets_output": True},  # the offsets are a graph output
])
def test_other_shapes_are_left_byte_for_byte(change):
    model = pool_model(**change)
    assert fold_pool_offsets(model) == model


def test_the_unit_pool_no_longer_sets_the_op_footprint_bound():
    """The 1x1 pool writes an int64 and a float copy of its input: on a large enough input it is
    the op with the largest footprint, which the constant removes."""
    model = pool_model((64, 64))
    before, after = (order_lower_bound(load_graph(m)) for m in (model, fold_pool_offsets(model)))
    x_bytes = 2 * 3 * 64 * 64 * 4
    assert before >= 4 * x_bytes > after  # x, its float copy and its int64 indices, at once
