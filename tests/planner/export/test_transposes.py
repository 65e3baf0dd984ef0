"""Transpose folding (planner.export.transposes) on hand-built graphs and committed exports.

Every folded graph must pass onnx.checker and strict shape inference and give what the graph
before folding gives in a real ONNX Runtime session (within 1e-5 of the largest output value).
The fixture graphs were exported before folding existed, so they are the unfolded originals.
Only the last test exports (needs the export extra).
"""

from __future__ import annotations

import copy
import importlib.util
import signal

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, shape_inference

from planner.export.transposes import fold_transposes
from tests.support.fixture_zoo import FIXTURE_DIR
from tests.support.onnx_builders import make_model, value

RELATIVE = 1e-5


def _t(source: str, out: str) -> onnx.NodeProto:
    return helper.make_node("Transpose", [source], [out], perm=[1, 0])


def _inferred(model: onnx.ModelProto) -> onnx.ModelProto:
    return shape_inference.infer_shapes(model, check_type=True, strict_mode=True)


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds), strict=True))


def _random_feeds(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {v.name: rng.standard_normal([d.dim_value for d in v.type.tensor_type.shape.dim],
                                        dtype=np.float32)
            for v in model.graph.input}


def _assert_close(expected: dict[str, np.ndarray], got: dict[str, np.ndarray]) -> None:
    assert set(got) == set(expected)
    for name, want in expected.items():
        have = got[name]
        assert have.shape == want.shape and have.dtype == want.dtype, name
        if want.dtype.kind != "f":
            np.testing.assert_array_equal(have, want, err_msg=name)
            continue
        scale = max(float(np.max(np.abs(want), initial=0.0)), 1e-30)
        assert float(np.max(np.abs(have - want), initial=0.0)) <= RELATIVE * scale, name


def _fold(model: onnx.ModelProto, feeds=None) -> tuple[onnx.ModelProto, int]:
    """Fold a copy of `model` (shapes inferred first), check it and compare it with `model`."""
    before = _inferred(model)
    after = copy.deepcopy(before)
    rewrites = fold_transposes(after)
    del after.graph.value_info[:]
    onnx.checker.check_model(after, full_check=True)  # includes topological order
    after = _inferred(after)
    assert [v.name for v in after.graph.output] == [v.name for v in model.graph.output]
    feeds = _random_feeds(model) if feeds is None else feeds
    _assert_close(_run(before, feeds), _run(after, feeds))
    return after, rewrites


def _ops(model: onnx.ModelProto) -> list[str]:
    return [node.op_type for node in model.graph.node]


def _attrs(node: onnx.NodeProto) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def test_r1_double_transpose_reads_the_source():
    model = make_model(
        [_t("x", "t1"), _t("t1", "t2"), helper.make_node("Relu", ["t2"], ["y"])],
        [value("x", [3, 5])], [value("y", [3, 5])])
    folded, rewrites = _fold(model)
    assert rewrites == 1
    assert _ops(folded) == ["Relu"]
    assert list(folded.graph.node[0].input) == ["x"]


def test_r1_keeps_a_graph_output_name():
    model = make_model(
        [_t("x", "t1"), _t("t1", "t2"), helper.make_node("Relu", ["t2"], ["y"])],
        [value("x", [3, 5])], [value("t2", [3, 5]), value("y", [3, 5])])
    folded, _ = _fold(model)
    assert _ops(folded) == ["Identity", "Relu"]
    identity, relu = folded.graph.node
    assert list(identity.input) == ["x"] and list(identity.output) == ["t2"]
    assert list(relu.input) == ["t2"]


def test_r2_matmul_and_gemm_read_the_untransposed_operands():
    model = make_model(
        [_t("a", "at"), helper.make_node("MatMul", ["at", "b"], ["p"]),
         _t("w", "wt"), helper.make_node("Gemm", ["p", "wt", "c"], ["q"], alpha=0.5, beta=2.0)],
        [value("a", [4, 3]), value("b", [4, 6]), value("w", [5, 6]), value("c", [5])],
        [value("q", [3, 5])])
    folded, rewrites = _fold(model)
    assert rewrites == 2
    assert _ops(folded) == ["Gemm", "Gemm"]
    first, second = folded.graph.node
    assert list(first.input) == ["a", "b"]
    assert _attrs(first) == {"alpha": 1.0, "beta": 1.0, "transA": 1, "transB": 0}
    assert list(second.input) == ["p", "w", "c"]
    assert _attrs(second) == {"alpha": 0.5, "beta": 2.0, "transA": 0, "transB": 1}


def test_r2_flips_a_flag_that_was_already_set():
    model = make_model(
        [_t("w", "wt"), helper.make_node("Gemm", ["x", "wt"], ["y"], transB=1)],
        [value("x", [2, 3]), value("w", [3, 4])], [value("y", [2, 4])])
    folded, _ = _fold(model)
    assert _ops(folded) == ["Gemm"]
    assert _attrs(folded.graph.node[0])["transB"] == 0


def test_r3_transposed_product_is_one_gemm():
    """The weight gradient torch traces for a linear layer: (g^T x)^T."""
    model = make_model(
        [_t("g", "gt"), helper.make_node("MatMul", ["gt", "x"], ["p"]), _t("p", "grad")],
        [value("g", [8, 4]), value("x", [8, 6])], [value("grad", [6, 4])])
    folded, rewrites = _fold(model)
    assert rewrites == 2  # R2, then R3
    assert _ops(folded) == ["Gemm"]
    (gemm,) = folded.graph.node
    assert list(gemm.input) == ["x", "g"] and list(gemm.output) == ["grad"]
    assert _attrs(gemm) == {"alpha": 1.0, "beta": 1.0, "transA": 1, "transB": 0}


@pytest.mark.parametrize("case", ["product_is_output", "product_read_twice", "gemm_with_c"])
def test_r3_leaves_a_product_that_must_stay(case):
    nodes = [helper.make_node("MatMul", ["a", "b"], ["p"]), _t("p", "pt")]
    outputs = [value("pt", [5, 3])]
    inputs = [value("a", [3, 4]), value("b", [4, 5])]
    if case == "product_is_output":
        outputs.append(value("p", [3, 5]))
    elif case == "product_read_twice":
        nodes.append(helper.make_node("Relu", ["p"], ["r"]))
        outputs.append(value("r", [3, 5]))
    else:
        nodes[0] = helper.make_node("Gemm", ["a", "b", "c"], ["p"])
        inputs.append(value("c", [5]))
    model = make_model(nodes, inputs, outputs)
    folded, rewrites = _fold(model)
    assert rewrites == 0
    assert folded.graph.node == _inferred(model).graph.node


def test_transpose_with_two_readers_stays_for_the_other_one():
    model = make_model(
        [_t("w", "wt"), helper.make_node("Gemm", ["x", "wt", "c"], ["y"]),
         helper.make_node("Relu", ["wt"], ["r"])],
        [value("x", [2, 3]), value("w", [4, 3]), value("c", [4])],
        [value("y", [2, 4]), value("r", [3, 4])])
    folded, rewrites = _fold(model)
    assert rewrites == 1
    assert _ops(folded) == ["Transpose", "Gemm", "Relu"]
    assert list(folded.graph.node[1].input) == ["x", "w", "c"]


def test_batched_and_broadcast_matmuls_and_other_perms_are_untouched():
    model = make_model(
        [_t("a", "at"), helper.make_node("MatMul", ["at", "b"], ["p"]),
         helper.make_node("Transpose", ["c"], ["ct"], perm=[0, 2, 1]),
         helper.make_node("MatMul", ["ct", "d"], ["q"])],
        [value("a", [4, 3]), value("b", [2, 4, 5]), value("c", [2, 4, 3]),
         value("d", [2, 4, 5])],
        [value("p", [2, 3, 5]), value("q", [2, 3, 5])])
    folded, rewrites = _fold(model)
    assert rewrites == 0
    assert _ops(folded) == ["Transpose", "MatMul", "Transpose", "MatMul"]


def test_a_transpose_without_perm_on_a_matrix_folds():
    model = make_model(
        [helper.make_node("Transpose", ["w"], ["wt"]),
         helper.make_node("MatMul", ["x", "wt"], ["y"])],
        [value("x", [2, 3]), value("w", [4, 3])], [value("y", [2, 4])])
    folded, _ = _fold(model)
    assert _ops(folded) == ["Gemm"]


def test_nodes_unread_before_folding_stay():
    """Including an unread pair of transposes, which R1 has no reader to rewire for (an alarm
    turns a rewrite loop into a failure)."""
    model = make_model(
        [helper.make_node("Relu", ["x"], ["unused"]), _t("x", "xt"), _t("xt", "xtt"),
         _t("w", "wt"), helper.make_node("MatMul", ["x", "wt"], ["y"])],
        [value("x", [2, 3]), value("w", [4, 3])], [value("y", [2, 4])])
    previous = signal.signal(signal.SIGALRM, _too_long)
    signal.alarm(20)
    try:
        folded, rewrites = _fold(model)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert rewrites == 1
    assert _ops(folded) == ["Relu", "Transpose", "Transpose", "Gemm"]


def _too_long(signum, frame):
    raise TimeoutError("fold_transposes did not reach a fixed point")


@pytest.mark.parametrize("name", ["mlp_sgd", "cnn_bn_momentum", "gpt2_tiny_adam"])
def test_committed_exports_fold_and_still_compute_the_same(name):
    model = onnx.load(FIXTURE_DIR / f"{name}.onnx")
    with np.load(FIXTURE_DIR / f"{name}.inputs.npz") as npz:
        feeds = {key: npz[key] for key in npz.files}
    before = sum(op == "Transpose" for op in _ops(model))
    folded, rewrites = _fold(model, feeds)
    assert rewrites > 0
    assert sum(op == "Transpose" for op in _ops(folded)) < before


@pytest.mark.export
def test_exported_mlp_has_no_weight_transpose_and_matches_torch():
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnxscript")
    from planner.export import OptimizerSpec, export_training_graph

    spec = importlib.util.spec_from_file_location("transposes_fixture_models",
                                                  FIXTURE_DIR / "models.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(4, 32, generator=gen)
    y = torch.randint(0, 10, (4,), generator=gen)
    result = export_training_graph(module.MLP(), (x,), (y,), "cross_entropy",
                                   OptimizerSpec("sgd", lr=0.1), tolerance=1e-4)
    assert result.max_abs_diff_loss <= 1e-4 and result.max_abs_diff_updates <= 1e-4
    nodes = result.model.graph.node
    assert "Transpose" not in {node.op_type for node in nodes}
    weights = set(result.input_names("parameter"))
    gemms = [node for node in nodes if node.op_type == "Gemm"]
    assert {node.input[1] for node in gemms} & weights  # the forward reads W as is, transB=1
