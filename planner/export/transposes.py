"""Fold 2-D transposes into the matrix products that read or produce them (no torch needed).

torch's `nn.Linear` traces as `addmm(b, x, W.t())` and its backward as `mm(g, W.t().t())` and
`mm(g.t(), x)`; exported, every `.t()` is a Transpose node that copies its whole input. Torch
never makes those copies (a transpose is a strided view and its GEMM reads it as is), but an
ONNX graph materializes them: on VGG-11 each one is a 392 MB copy of the first classifier
weight, and they alone set the op-footprint memory bound. Gemm has transA / transB flags that
say the same thing without a copy, so on 2-D tensors with perm [1, 0]:

- R1: Transpose(Transpose(x)) is x. Readers of the outer one read x; when the outer output is a
  graph output (whose name must not change) it becomes Identity(x).
- R2: a Gemm, or a MatMul of two 2-D float tensors, reading Transpose(x) as A or B reads x with
  that operand's trans flag flipped (a MatMul becomes a Gemm with alpha 1 and no C).
- R3: Transpose(P) where P is a Gemm without C or such a MatMul, the Transpose is P's only
  reader and P is not a graph output, is one Gemm: (op(A) op(B))^T = op(B)^T op(A)^T, that is
  Gemm(B, A, transA = not transB, transB = not transA, same alpha).

R1 and R3 each take a Transpose away (R1's outer one is left unread or becomes an Identity) and
R2 a read of one; no rule makes a Transpose, so rewriting to a fixed point ends. Nodes left
unread by a rewrite are dropped (nodes unread before stay); every rewritten node keeps the
position of a node it replaces and reads only values produced before it, which keeps the graph
topologically sorted. Only standard-domain nodes of a flat graph are touched, and ranks and
types are read from the model's value_info (run shape inference first, and again afterwards:
planner.export.onnx_graph.finalize does both).
"""

from __future__ import annotations

from typing import Any

import onnx
from onnx import AttributeProto, TensorProto, helper

STANDARD_DOMAINS = ("", "ai.onnx")
#: Element types that a MatMul may be turned into a Gemm for (ONNX Runtime's CPU Gemm kernels).
GEMM_TYPES = frozenset({TensorProto.FLOAT, TensorProto.DOUBLE})


def _attribute(node: onnx.NodeProto, name: str, default: Any) -> Any:
    for attr in node.attribute:
        if attr.name == name:
            return helper.get_attribute_value(attr)
    return default


class _Index:
    """Producers, readers (node positions), ranks and element types of a flat graph's values.

    Rules change nodes in place and never add, remove or rename outputs, so producers, ranks
    and types stay true; inputs change through `rewire`, which keeps the readers true. Nodes
    a rule leaves unread still count as readers until the sweep ends and they are dropped.
    """

    def __init__(self, graph: onnx.GraphProto) -> None:
        self.nodes = list(graph.node)
        self.outputs = {v.name for v in graph.output}
        self.producer: dict[str, int] = {}
        self.readers: dict[str, list[int]] = {}
        for position, node in enumerate(self.nodes):
            for name in node.output:
                self.producer[name] = position
            for name in node.input:
                if name:
                    self.readers.setdefault(name, []).append(position)
        self.rank: dict[str, int] = {}
        self.dtype: dict[str, int] = {}
        for value in (*graph.input, *graph.value_info, *graph.output):
            tensor = value.type.tensor_type
            if tensor.HasField("shape"):
                self.rank[value.name] = len(tensor.shape.dim)
            if tensor.elem_type:
                self.dtype[value.name] = tensor.elem_type
        for init in graph.initializer:
            self.rank[init.name] = len(init.dims)
            self.dtype[init.name] = init.data_type

    def rewire(self, position: int, slot: int, name: str) -> None:
        """Input `slot` of the node at `position` reads `name` from now on."""
        inputs = self.nodes[position].input
        self.readers[inputs[slot]].remove(position)
        self.readers.setdefault(name, []).append(position)
        inputs[slot] = name

    def transpose_2d(self, name: str) -> int | None:
        """The standard Transpose swapping the axes of a 2-D tensor that produces `name`."""
        position = self.producer.get(name)
        if position is None:
            return None
        node = self.nodes[position]
        if node.op_type != "Transpose" or node.domain not in STANDARD_DOMAINS:
            return None
        perm = _attribute(node, "perm", None)
        if perm is None:
            return position if self.rank.get(node.input[0]) == 2 else None
        return position if list(perm) == [1, 0] else None

    def gemm_like(self, node: onnx.NodeProto) -> bool:
        """A Gemm, or a MatMul of two 2-D tensors of a type a Gemm takes."""
        if node.domain not in STANDARD_DOMAINS:
            return False
        if node.op_type == "Gemm":
            return True
        return (node.op_type == "MatMul"
                and all(self.rank.get(name) == 2 for name in node.input)
                and self.dtype.get(node.output[0]) in GEMM_TYPES)


def _flag(node: onnx.NodeProto, name: str) -> int:
    return int(_attribute(node, name, 0))


def _gemm_attributes(alpha: float, beta: float, trans_a: int,
                     trans_b: int) -> list[AttributeProto]:
    return [helper.make_attribute("alpha", alpha), helper.make_attribute("beta", beta),
            helper.make_attribute("transA", trans_a), helper.make_attribute("transB", trans_b)]


def _double_transpose(index: _Index, position: int) -> bool:
    """R1 with the outer Transpose at `position`."""
    node = index.nodes[position]
    if index.transpose_2d(node.output[0]) != position:
        return False
    inner = index.transpose_2d(node.input[0])
    if inner is None:
        return False
    source, result = index.nodes[inner].input[0], node.output[0]
    if result in index.outputs:
        node.op_type = "Identity"
        del node.attribute[:]
        index.rewire(position, 0, source)
        return True
    readers = sorted(set(index.readers.get(result, [])))
    for reader in readers:
        for slot, name in enumerate(index.nodes[reader].input):
            if name == result:
                index.rewire(reader, slot, source)
    return bool(readers)  # an unread pair was unread before folding: it stays as it is


def _transposed_operand(index: _Index, position: int) -> bool:
    """R2 at the Gemm or MatMul at `position`."""
    node = index.nodes[position]
    if not index.gemm_like(node):
        return False
    operands = [index.transpose_2d(node.input[slot]) for slot in (0, 1)]
    if operands == [None, None]:
        return False
    flags = [_flag(node, "transA"), _flag(node, "transB")]
    # A MatMul becomes a Gemm without C; a Gemm keeps its C, alpha and beta.
    alpha = float(_attribute(node, "alpha", 1.0))
    beta = float(_attribute(node, "beta", 1.0))
    for slot, transpose in enumerate(operands):
        if transpose is not None:
            index.rewire(position, slot, index.nodes[transpose].input[0])
            flags[slot] ^= 1
    node.op_type = "Gemm"
    del node.attribute[:]
    node.attribute.extend(_gemm_attributes(alpha, beta, *flags))
    return True


def _transposed_product(index: _Index, position: int) -> bool:
    """R3 with the Transpose of a product at `position`."""
    node = index.nodes[position]
    if index.transpose_2d(node.output[0]) != position:
        return False
    source = index.producer.get(node.input[0])
    if source is None:
        return False
    product = index.nodes[source]
    if (not index.gemm_like(product) or len(product.input) > 2
            or product.output[0] in index.outputs
            or len(index.readers.get(product.output[0], [])) != 1):
        return False
    alpha = float(_attribute(product, "alpha", 1.0))
    trans_a, trans_b = _flag(product, "transA"), _flag(product, "transB")
    # The Transpose node becomes the Gemm (its position and output name); the product is left
    # without readers and dropped as unread.
    node.op_type = "Gemm"
    del node.attribute[:]
    index.rewire(position, 0, product.input[1])
    node.input.append(product.input[0])
    index.readers.setdefault(product.input[0], []).append(position)
    node.attribute.extend(_gemm_attributes(alpha, 1.0, 1 - trans_b, 1 - trans_a))
    return True


RULES = (_double_transpose, _transposed_operand, _transposed_product)


def _has_subgraphs(graph: onnx.GraphProto) -> bool:
    return any(attr.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS)
               for node in graph.node for attr in node.attribute)


def _unread(graph: onnx.GraphProto, spare: set[tuple[str, ...]]) -> list[int]:
    """Positions of the nodes with outputs none of which is read or a graph output, except the
    nodes whose outputs are in `spare`."""
    read = {v.name for v in graph.output}
    for node in graph.node:
        read.update(node.input)
    return [position for position, node in enumerate(graph.node)
            if node.output and tuple(node.output) not in spare
            and not any(name in read for name in node.output)]


def _drop_unread(graph: onnx.GraphProto, spare: set[tuple[str, ...]]) -> None:
    """Remove unread nodes (but those in `spare`), then those that only they read, and so on."""
    while victims := _unread(graph, spare):
        for position in reversed(victims):
            del graph.node[position]


def fold_transposes(model: onnx.ModelProto) -> int:
    """Apply R1-R3 to a fixed point, dropping the nodes that only folded nodes read, in place.

    Returns how many rewrites were made (0: the model is unchanged). Nodes nothing read before
    stay. The value_info of values that disappear or change may be stale afterwards: run shape
    inference again.
    """
    graph = model.graph
    if _has_subgraphs(graph):
        return 0
    spare = {tuple(graph.node[p].output) for p in _unread(graph, set())}
    rewrites = 0
    while True:
        # One sweep in graph order; a rewrite can make a new match at a node before it, and
        # the nodes it leaves unread still read their inputs (R3 wants a single reader), so
        # sweeps repeat, without those nodes, until one rewrites nothing.
        index = _Index(graph)
        done = sum(any(rule(index, position) for rule in RULES)
                   for position in range(len(index.nodes)))
        if not done:
            return rewrites
        rewrites += done
        _drop_unread(graph, spare)
