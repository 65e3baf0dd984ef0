"""Fold a weight gradient's matrix product into its SGD update: `W - lr * (A @ B)` becomes
`Gemm(A, B, C=W, alpha=-lr, beta=1)`, written over W.

Why: a plain SGD step computes the gradient of a fully connected weight as a matrix product, scales
it and subtracts it from the weight. Even with every in-place rule (planner.memory.sharing), the
gradient is a buffer the size of the weight that exists next to it: VGG-11's first classifier
layer holds 411 MB of weight and, while it is updated, 411 MB of gradient, so no order and no
recomputation can plan that step below the persistent bytes plus 411 MB (the op-footprint bound).
Gemm adds `alpha * A @ B` to its addend C and may write its output over C (schemas.plan
.SINGLE_INPUT_IN_PLACE_OP_TYPES, proved bit-exact in tests/runtime/test_in_place_kernels.py): the
product then accumulates straight into the weight's bytes and the gradient never exists as a
buffer. PyTorch's optimizers cannot do this (gradients live in `.grad` until `step()`).

Matched, in float32 only, with every intermediate read once and not a graph output:

    P = Gemm(A, B) without C | FusedMatMul(A, B) without batch transposes | MatMul(A, B),
        A and B of rank 2
    S = Mul(P, c) | Mul(c, P), c a scalar float initializer   (optional: a FusedMatMul's alpha
        already carries the learning rate when ONNX Runtime folded the scale into it)
    U = Sub(W, S) | Add(W, S) | Add(S, W), W of P's static shape and neither A nor B

and replaced by `U = Gemm(A, B, W, alpha=+-alpha_P * c, beta=1, transA, transB)` at U's place.

Rounding: the kernel adds `alpha * A @ B` to W (in several passes over a long inner dimension)
instead of rounding `lr * g` first, so the step differs from ONNX Runtime's own session in the
last bits, like its own fusions do; `--check` compares optimized graphs with a tolerance.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper

from schemas.graph_rewrite import (
    DEFAULT_DOMAINS,
    GraphIndex,
    addend_comes_too_late,
    number,
    scalar,
    splice,
)

_CONTRIB = "com.microsoft"


@dataclass(frozen=True)
class _Product:
    """A rank-2 matrix product `alpha * op(A) @ op(B)` and the nodes that compute its scaled
    value (the product, and the scaling Mul when there is one)."""

    a: str
    b: str
    alpha: float
    trans_a: int
    trans_b: int
    nodes: tuple[int, ...]  # indices into graph.node


def fuse_sgd_updates(data: bytes) -> bytes:
    """`data` (a serialized model) with every matched update fused (see the module doc); the
    bytes unchanged when nothing matches, so the digest of a graph without one stays the same."""
    model = onnx.ModelProto()
    model.ParseFromString(data)
    graph = model.graph
    index = GraphIndex(graph)
    shapes, once = index.shapes, index.once

    def product(name: str) -> _Product | None:
        k = index.producer.get(name)
        if k is None or not once(name):
            return None
        node = graph.node[k]
        kind = (node.domain if node.domain not in DEFAULT_DOMAINS else "", node.op_type)
        inputs = [x for x in node.input]
        if kind == ("", "Gemm") and len(inputs) == 3 and inputs[2] == "":
            inputs = inputs[:2]
        if kind not in {("", "Gemm"), ("", "MatMul"), (_CONTRIB, "FusedMatMul")} or \
                len(inputs) != 2 or any(len(shapes.get(x, (0, ()))[1]) != 2 for x in inputs):
            return None
        if kind[1] == "FusedMatMul" and (number(node, "transBatchA", 0) or
                                         number(node, "transBatchB", 0)):
            return None
        return _Product(inputs[0], inputs[1], number(node, "alpha", 1.0),
                        int(number(node, "transA", 0)), int(number(node, "transB", 0)), (k,))

    def scaled(name: str) -> _Product | None:
        direct = product(name)
        k = index.producer.get(name)
        if direct is not None or k is None or not once(name):
            return direct
        node = graph.node[k]
        if node.op_type != "Mul" or node.domain not in DEFAULT_DOMAINS or len(node.input) != 2:
            return None
        for slot in (0, 1):
            scale = scalar(index.initializers.get(node.input[1 - slot]))
            inner = product(node.input[slot]) if scale is not None else None
            if inner is not None and scale is not None:
                return _Product(inner.a, inner.b, float(np.float32(inner.alpha * scale)),
                                inner.trans_a, inner.trans_b, (*inner.nodes, k))
        return None

    replaced: dict[int, onnx.NodeProto] = {}
    dropped: set[int] = set()
    for k, node in enumerate(graph.node):
        if node.op_type not in ("Sub", "Add") or node.domain not in DEFAULT_DOMAINS or \
                len(node.input) != 2:
            continue
        for w_slot in (0,) if node.op_type == "Sub" else (0, 1):
            weight, step = node.input[w_slot], node.input[1 - w_slot]
            found = scaled(step)
            if found is None or weight in (found.a, found.b) or dropped & set(found.nodes):
                continue
            if addend_comes_too_late(index, (found.a, found.b), weight,
                                     graph.node[found.nodes[0]].output[0], {*found.nodes, k}):
                continue  # a sum of gradients, not an update (schemas.late_addend)
            out_shape = shapes.get(graph.node[found.nodes[0]].output[0])
            if out_shape is None or shapes.get(weight) != out_shape or \
                    out_shape[0] != TensorProto.FLOAT:
                continue
            sign = -1.0 if node.op_type == "Sub" else 1.0
            replaced[k] = helper.make_node(
                "Gemm", [found.a, found.b, weight], [node.output[0]],
                name=f"{node.name}/SgdUpdateFusion", alpha=float(np.float32(sign * found.alpha)),
                beta=1.0, transA=found.trans_a, transB=found.trans_b)
            dropped.update(found.nodes)
            break
    if not replaced:
        return data
    return splice(model, {k: (node,) for k, node in replaced.items()}, dropped)
