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
                    view: bool = False, x_read_before: int = 0) -> bytes:
    """`s = 1 + op(x)` read by the forward's product `x * s`, then, after CHAIN matrix products
    on that product, by the backward's `g * s`, followed by `* late_reads` (`tanh`: op(x), as
    GPT-2-small's GELU backward reads its tanh; `x`: the input; `tanh x`: both; `none`: nothing
    held). With `view`, both products read `s` through a Reshape, as a weight gradient reads a
    GELU's output. With `x_read_before` > 0, the backward's last read of x comes that many
    nodes before its first read of `s` instead of after it."""
    nodes = [helper.make_node(op, ["x"], ["t"]),
             helper.make_node("Add", ["t", "one"], ["s0" if view else "s"])]
    if view:
        nodes.append(helper.make_node("Reshape", ["s0", "shape"], ["s"]))
    nodes.append(helper.make_node("Mul", ["x", "s"], ["back0"]))
    for k in range(chain):
        nodes.append(helper.make_node("MatMul", [f"back{k}", "w"], [f"back{k + 1}"]))
    last = f"back{chain}"
    if x_read_before:
        nodes.append(helper.make_node("Mul", [last, "x"], ["gx0"]))
        for k in range(x_read_before - 1):
            nodes.append(helper.make_node("MatMul", [f"gx{k}", "w"], [f"gx{k + 1}"]))
        last = f"gx{x_read_before - 1}"
    nodes.append(helper.make_node("Mul", [last, "s"], ["g"]))
    held = {"tanh": ["t"], "x": ["x"], "tanh x": ["t", "x"], "none": []}[late_reads]
    for k, name in enumerate(held):
        nodes.append(helper.make_node("Mul", [f"g{'x' * k}", name], [f"g{'x' * (k + 1)}"]))
    nodes.append(helper.make_node("Identity", [f"g{'x' * len(held)}"], ["grad"]))
    return finished(nodes, "gelu_like")


def dropout_like_model() -> bytes:
    """A dropout's float mask `d = Cast(x < 0) / 0.5` and the product `p = x * d`, each read in
    the forward and again in the backward: `d` by the backward's first product, then `p`, then
    `d` again (its boolean `x < 0` is read by nothing after the forward)."""
    nodes = [helper.make_node("Less", ["x", "zero"], ["b"]),
             helper.make_node("Cast", ["b"], ["m"], to=F),
             helper.make_node("Div", ["m", "keep"], ["d"]),
             helper.make_node("Mul", ["x", "d"], ["p"]),
             helper.make_node("Mul", ["p", "d"], ["back0"])]
    for k in range(CHAIN):
        nodes.append(helper.make_node("MatMul", [f"back{k}", "w"], [f"back{k + 1}"]))
    nodes += [helper.make_node("Mul", [f"back{CHAIN}", "d"], ["g1"]),
              helper.make_node("Mul", ["g1", "p"], ["g2"]),
              helper.make_node("Mul", ["g2", "d"], ["g3"]),
              helper.make_node("Mul", ["g3", "x"], ["grad"])]
    return finished(nodes, "dropout_like")


def finished(nodes: list[onnx.NodeProto], name: str) -> bytes:
    graph = helper.make_graph(
        nodes, name,
        [helper.make_tensor_value_info("x", F, [ROWS, WIDTH]),
         helper.make_tensor_value_info("w", F, [WIDTH, WIDTH])],
        [helper.make_tensor_value_info("grad", F, [ROWS, WIDTH])],
        [numpy_helper.from_array(np.ones((1,), np.float32), "one"),
         numpy_helper.from_array(np.zeros((1,), np.float32), "zero"),
         numpy_helper.from_array(np.full((1,), 0.5, np.float32), "keep"),
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


def late_inputs(model: bytes, output: str) -> list[str]:
    """What the node writing `output` reads."""
    return next(list(n.input) for n in onnx.load_from_string(model).graph.node
                if n.output[0] == output)


def test_a_value_held_only_for_its_own_late_readers_is_made_again_with_the_chain(
        tmp_path: Path) -> None:
    """The tanh is read late too, but what it is made from (x) is held: it is made again with
    the sum instead of held through the forward, and its late reader reads the copy."""
    before = gelu_like_model("tanh x")
    after = recompute_for_late_readers(before)
    assert [n.op_type for n in copies(after)] == ["Tanh", "Add"]
    assert late_inputs(after, "gx") == ["g", "t/late"]
    np.testing.assert_array_equal(run(after), run(before))
    value = ROWS * WIDTH * 4
    assert keep_everything_peak(after, tmp_path, "after") <= \
        keep_everything_peak(before, tmp_path, "before") - 2 * value


def test_the_copies_run_before_the_last_read_of_what_they_are_made_from(tmp_path: Path) -> None:
    """x's last read comes 3 nodes before the sum's late reader: the copies run right before it,
    where x is still held."""
    before = gelu_like_model("none", x_read_before=3)
    after = recompute_for_late_readers(before)
    nodes = [n.output[0] for n in onnx.load_from_string(after).graph.node]
    assert nodes.index("t/late") < nodes.index("s/late") < nodes.index("gx0")
    assert late_inputs(after, "g")[1] == "s/late"
    np.testing.assert_array_equal(run(after), run(before))
    assert keep_everything_peak(after, tmp_path, "after") < \
        keep_everything_peak(before, tmp_path, "before")


def test_a_float_mask_is_made_again_from_its_boolean_and_read_by_later_copies(
        tmp_path: Path) -> None:
    """The float mask is made again from the boolean (a quarter of its bytes), which is held in
    its place; the product made again after it reads the mask's copy, as the original is no
    longer held there."""
    before = dropout_like_model()
    after = recompute_for_late_readers(before)
    assert [(n.op_type, list(n.input)) for n in copies(after)] == [
        ("Cast", ["b"]), ("Div", ["m/late", "keep"]), ("Mul", ["x", "d/late"])]
    assert late_inputs(after, "g3") == ["g2", "d/late"]
    np.testing.assert_array_equal(run(after), run(before))
    value = ROWS * WIDTH * 4
    assert keep_everything_peak(after, tmp_path, "after") <= \
        keep_everything_peak(before, tmp_path, "before") - value
