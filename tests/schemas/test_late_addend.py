"""schemas.late_addend: a matrix product kept apart from an addend made much later (a tied
embedding's gradient), checked on small models run by ONNX Runtime before and after the rewrite,
the order's peak of both, and the shapes it must leave alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from planner.ir.graph import load_graph
from planner.order import optimize_order
from schemas.late_addend import split_late_addends
from schemas.update_fusion import fuse_sgd_updates

F = TensorProto.FLOAT
TOKENS, VOCAB, HIDDEN = 64, 96, 8
CHAIN = 6


def tied_gradient_model(tokens: int = TOKENS, fused: bool = True, addend_input: bool = False
                        ) -> bytes:
    """A tied weight's gradient, `head + scatter`, as GPT-2's export has it: the head's product
    `transpose(dlogits) @ hidden` ([VOCAB, HIDDEN], its factors ready at once, the transpose
    read by nothing else) and an addend made after a chain of CHAIN matrix products that starts
    from the logits' gradient (the backward down to the embedding). `fused`: one
    Gemm adds the product to the addend (ONNX Runtime's MatMulAddFusion); else MatMul and Add,
    which the SGD update fusion would fold into that Gemm. `tokens`: the rows of both factors.
    `addend_input`: the addend is a graph
    input (ready before the factors)."""
    nodes = [helper.make_node("Relu", ["dlogits_in"], ["dlogits"]),
             helper.make_node("Relu", ["hidden_in"], ["hidden"]),
             helper.make_node("MatMul", ["dlogits", "w_back"], ["back0"])]
    for k in range(CHAIN):
        nodes.append(helper.make_node("MatMul", [f"back{k}", "w_back"], [f"back{k + 1}"]))
    nodes.append(helper.make_node("Gemm", [f"back{CHAIN}", "w_embed"], ["scatter"], transA=1))
    # The transposed logits' gradient is made for the head's product alone, just before it.
    nodes.append(helper.make_node("Transpose", ["dlogits"], ["dlogits_t"], perm=[1, 0]))
    addend = "scatter_in" if addend_input else "scatter"
    if fused:
        nodes.append(helper.make_node("Gemm", ["dlogits_t", "hidden", addend], ["grad"]))
    else:
        nodes += [helper.make_node("Gemm", ["dlogits_t", "hidden"], ["head"]),
                  helper.make_node("Add", ["head", addend], ["grad"])]
    inputs = [helper.make_tensor_value_info("dlogits_in", F, [tokens, VOCAB]),
              helper.make_tensor_value_info("hidden_in", F, [tokens, HIDDEN]),
              helper.make_tensor_value_info("w_back", F, [VOCAB, VOCAB]),
              helper.make_tensor_value_info("w_embed", F, [tokens, HIDDEN])]
    outputs = [helper.make_tensor_value_info("grad", F, [VOCAB, HIDDEN])]
    if addend_input:
        inputs.append(helper.make_tensor_value_info("scatter_in", F, [VOCAB, HIDDEN]))
        outputs.append(helper.make_tensor_value_info("scatter", F, [VOCAB, HIDDEN]))
    graph = helper.make_graph(nodes, "tied", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return onnx.shape_inference.infer_shapes(model).SerializeToString()


def run(model: bytes, values: dict[str, np.ndarray]) -> np.ndarray:
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    names = {i.name for i in session.get_inputs()}
    return session.run(["grad"], {k: v for k, v in values.items() if k in names})[0]


def feeds(model: bytes) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(5)
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    return {i.name: rng.standard_normal(i.shape).astype(np.float32)
            for i in session.get_inputs()}


def keep_everything_peak(model: bytes, tmp_path: Path, name: str) -> int:
    path = tmp_path / f"{name}.onnx"
    path.write_bytes(model)
    graph = load_graph(path)
    return optimize_order(graph, time_limit=5.0).peak_bytes


def test_the_product_is_kept_apart_from_a_late_addend(tmp_path: Path) -> None:
    before = tied_gradient_model()
    after = split_late_addends(before)
    nodes = onnx.load_from_string(after).graph.node
    assert [n.op_type for n in nodes[-2:]] == ["Gemm", "Add"]
    product, add = nodes[-2:]
    assert list(product.input) == ["dlogits_t", "hidden"]
    assert list(add.input) == [product.output[0], "scatter"] and list(add.output) == ["grad"]
    values = feeds(before)
    np.testing.assert_allclose(run(after, values), run(before, values), rtol=1e-5, atol=1e-5)
    # The transposed gradient (24 KB) dies at the product, which is 3 KB: the order runs it
    # early.
    fused_peak = keep_everything_peak(before, tmp_path, "fused")
    split_peak = keep_everything_peak(after, tmp_path, "split")
    assert split_peak <= fused_peak - TOKENS * VOCAB * 4 + VOCAB * HIDDEN * 4


def test_the_sgd_update_fusion_does_not_fold_a_late_addend() -> None:
    before = tied_gradient_model(fused=False)
    assert fuse_sgd_updates(before) == before


@pytest.mark.parametrize("case", [
    {"tokens": 2},  # the product (96 x 8) outweighs its factors (96 x 2, 2 x 8): kept whole
    {"addend_input": True},  # the addend is there from the start: the Gemm runs at once
])
def test_a_gemm_whose_addend_is_not_late_or_is_cheap_to_wait_for_stays_whole(
        case: dict[str, Any]) -> None:
    before = tied_gradient_model(**case)
    assert split_late_addends(before) == before
