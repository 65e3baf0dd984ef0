"""schemas.late_recompute: a cheap elementwise value read in the forward and again in the backward
is computed again before its backward readers, from values held there anyway. Checked on small
models run by ONNX Runtime before and after the rewrite (bit for bit), by the keep-everything
order's peak of both, and on the shapes it must leave alone."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from planner.ir.graph import load_graph
from planner.order import optimize_order
from schemas.late_recompute import recompute_for_late_readers

F = TensorProto.FLOAT
ROWS, WIDTH = 64, 64  # 16 KiB values
CHAIN = 12  # matrix products standing for the rest of the forward and the backward


def gelu_like_model(late_reads: str = "tanh", chain: int = CHAIN, op: str = "Tanh",
                    view: bool = False) -> bytes:
    """`s = 1 + op(x)` read by the forward's product `x * s`, then, after CHAIN matrix products
    on that product, by the backward's `g * s`, followed by `* late_reads` (`tanh`: op(x), as
    GPT-2-small's GELU backward reads its tanh; `x`: the input; `none`: nothing held). With
    `view`, both products read `s` through a Reshape, as a weight gradient reads a GELU's
    output."""
    nodes = [helper.make_node(op, ["x"], ["t"]),
             helper.make_node("Add", ["t", "one"], ["s0" if view else "s"])]
    if view:
        nodes.append(helper.make_node("Reshape", ["s0", "shape"], ["s"]))
    nodes.append(helper.make_node("Mul", ["x", "s"], ["back0"]))
    for k in range(chain):
        nodes.append(helper.make_node("MatMul", [f"back{k}", "w"], [f"back{k + 1}"]))
    nodes.append(helper.make_node("Mul", [f"back{chain}", "s"], ["g"]))
    held = {"tanh": "t", "x": "x", "none": None}[late_reads]
    if held is None:
        nodes.append(helper.make_node("Identity", ["g"], ["grad"]))
    else:
        nodes.append(helper.make_node("Mul", ["g", held], ["grad"]))
    graph = helper.make_graph(
        nodes, "gelu_like",
        [helper.make_tensor_value_info("x", F, [ROWS, WIDTH]),
         helper.make_tensor_value_info("w", F, [WIDTH, WIDTH])],
        [helper.make_tensor_value_info("grad", F, [ROWS, WIDTH])],
        [numpy_helper.from_array(np.ones((1,), np.float32), "one"),
         numpy_helper.from_array(np.array([ROWS, WIDTH], np.int64), "shape")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return onnx.shape_inference.infer_shapes(model).SerializeToString()


def run(model: bytes) -> np.ndarray:
    rng = np.random.default_rng(3)
    feeds = {"x": rng.standard_normal((ROWS, WIDTH)).astype(np.float32),
             "w": (rng.standard_normal((WIDTH, WIDTH)) / WIDTH).astype(np.float32)}
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    return session.run(["grad"], feeds)[0]


def keep_everything_peak(model: bytes, tmp_path: Path, name: str) -> int:
    path = tmp_path / f"{name}.onnx"
    path.write_bytes(model)
    return optimize_order(load_graph(path), time_limit=5.0).peak_bytes


def copies(model: bytes) -> list[onnx.NodeProto]:
    return [n for n in onnx.load_from_string(model).graph.node
            if n.name.endswith("/LateRecompute")]


@pytest.mark.parametrize(("late_reads", "view", "copied"), [
    ("tanh", False, ["Add"]),  # the tanh is held for the backward: only the sum is made again
    ("x", False, ["Tanh", "Add"]),  # only the input is held: the tanh is made again too
    ("tanh", True, ["Add", "Reshape"]),  # read through a view: the view is made again too
])
def test_a_sum_read_again_in_the_backward_is_made_again_there(
        tmp_path: Path, late_reads: str, view: bool, copied: list[str]) -> None:
    before = gelu_like_model(late_reads, view=view)
    after = recompute_for_late_readers(before)
    assert [n.op_type for n in copies(after)] == copied
    nodes = list(onnx.load_from_string(after).graph.node)
    late_mul = next(n for n in nodes if n.output[0] == "g")
    assert late_mul.input[1] == "s/late"
    assert nodes.index(late_mul) == nodes.index(copies(after)[-1]) + 1
    np.testing.assert_array_equal(run(after), run(before))
    # The sum (16 KiB) no longer lives through the products between its two reads.
    value = ROWS * WIDTH * 4
    assert keep_everything_peak(after, tmp_path, "after") <= \
        keep_everything_peak(before, tmp_path, "before") - value


@pytest.mark.parametrize("case", [
    {"late_reads": "none"},  # nothing it is made from is held: a copy would hold x instead
    {"chain": 0},  # read twice in a row: no gap
    {"late_reads": "x", "op": "Softmax"},  # the chain needs an op that is not elementwise
])
def test_a_value_not_cheap_to_make_again_late_stays_held(case: dict) -> None:
    before = gelu_like_model(**case)
    assert recompute_for_late_readers(before) == before
