"""Keep a matrix product apart from an addend made much later: `Y = Gemm(A, B, C)` becomes
`P = Gemm(A, B)` and `Y = Add(P, C)` where C is made long after A and B, and running the product
as soon as its factors exist frees more bytes than it takes.

Why: a tied embedding's gradient is the sum of the language-model head's product
(`dlogits^T @ hidden`, ready at the start of the backward) and the embedding lookup's scatter
(ready at its very end). ONNX Runtime's MatMulAddFusion folds the two into one Gemm, and our SGD
update fusion (schemas.update_fusion) would read the sum as an update of the scatter. That Gemm
cannot run before the scatter exists, so its factors live through the whole backward. GPT-2-tiny
holds a 24 KB transposed logits gradient, made for the Gemm alone, and 8 KB of hidden states for
a 12 KB product: apart, its keep-everything arena is 721.6 -> 701.6 KiB. PyTorch's autograd adds
the head's product into `.grad` at once.

When a factor is still read by other nodes after the product could run, the product does not free
it, and running the product early only adds its bytes, often where the step peaks: BERT-small's
logits gradient (125 MB) is also read by the hidden states' gradient, and its product (62.5 MB)
run at the start of the backward raised the keep-everything peak from 688.7 to 742.8 MB. Such a
Gemm stays whole, and so does one whose product outweighs its factors (GPT-2-small: 154 MB of
product from 103 MB of logits gradient). The rule is schemas.graph_rewrite.addend_comes_too_late,
shared with the SGD update fusion.

Matched: a standard Gemm with an addend of its output's static shape, `beta` 1, float32. The
product keeps `alpha`, `transA` and `transB`. Rounding: the product is rounded before the addend
is added, where the Gemm accumulated into the addend; `--check` compares optimized graphs with a
tolerance.
"""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

from schemas.graph_rewrite import (
    DEFAULT_DOMAINS,
    GraphIndex,
    addend_comes_too_late,
    number,
    splice,
)


def split_late_addends(data: bytes) -> bytes:
    """`data` (a serialized model) with every matched Gemm split in two (see the module doc);
    the bytes unchanged when nothing matches, so the digest of a graph without one stays the
    same."""
    model = onnx.ModelProto()
    model.ParseFromString(data)
    graph = model.graph
    index = GraphIndex(graph)
    replaced: dict[int, tuple[onnx.NodeProto, ...]] = {}
    for k, node in enumerate(graph.node):
        if node.op_type != "Gemm" or node.domain not in DEFAULT_DOMAINS or \
                len(node.input) != 3 or not node.input[2]:
            continue
        a, b, addend = node.input
        out = node.output[0]
        shape = index.shapes.get(out)
        if shape is None or shape[0] != TensorProto.FLOAT or index.shapes.get(addend) != shape \
                or number(node, "beta", 1.0) != 1.0:
            continue
        if not addend_comes_too_late(index, (a, b), addend, out, {k}):
            continue
        product = f"{out}/product"
        replaced[k] = (
            helper.make_node("Gemm", [a, b], [product], name=f"{node.name}/LateAddend/product",
                             alpha=number(node, "alpha", 1.0),
                             transA=int(number(node, "transA", 0)),
                             transB=int(number(node, "transB", 0))),
            helper.make_node("Add", [product, addend], [out], name=f"{node.name}/LateAddend/add"),
        )
    if not replaced:
        return data
    return splice(model, replaced, ())
