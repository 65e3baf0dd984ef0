"""Write the cross-entropy gradient over the softmax instead of next to a one-hot matrix.

Why: the backward of `cross_entropy(logits, labels)` as torch exports it builds the gradient of
the log-softmax as a dense one-hot matrix the size of the logits and subtracts the softmax from
it:

    Z = Expand(0, [N, V]) | ConstantOfShape([N, V], 0) | zeros [N, V] (an initializer)
    S = ScatterElements(Z, idx, U, axis)          one index per row: U = -1 at the label
    A = Mul(S, w) | Mul(w, S)                     optional: w the per-row loss scale, 1 along axis
    s = ReduceSum(A, axes=[axis], keepdims=1)     optional readers of A
    B = Mul(Exp(log_softmax), s)                  any value of A's shape
    G = Sub(A, B)

So two logits-sized buffers (A, and the softmax in the log-softmax's storage) are live together:
on BERT-small with a 30,522-word vocabulary and 1,024 tokens, 119 MiB each, at the step's peak.
PyTorch eager has the same two; torch.compile fuses them. Since S has one nonzero per row,

    A = w * U at the label, 0 elsewhere;  s = that one value per row;  G = -B, plus A at the label

which is, with `r = Mul(U, w)` ([N, 1] along the axis):

    s = ReduceSum(r, axes=[axis]);  N = Sub(0, B);  G = ScatterElements(N, idx, r, reduction=add)

and both run in place (Sub over B, the scatter over its data input: schemas.plan's in-place op
types), so the gradient takes the softmax's bytes and no one-hot exists.

Rounding: none changes. A row sum of one value and zeros is that value; `0 - b` is `-b`; and at
the label `(-b) + a` is IEEE's definition of `a - b`. Only the sign of an exact zero may differ
(a row whose loss scale is 0). Matched in float types only, with Z, S and A read by nothing else
(A by the Sub and those ReduceSums), idx one index per row along the axis, and opset 16 or later
(ScatterElements' reduction).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from schemas.graph_rewrite import GraphIndex, attribute, default_opset, scalar, splice

# ScatterElements takes `reduction` from this opset on.
REDUCTION_OPSET = 16
_FLOATS: dict[int, type[np.floating]] = {
    TensorProto.FLOAT: np.float32, TensorProto.FLOAT16: np.float16, TensorProto.DOUBLE: np.float64}


@dataclass(frozen=True)
class _OneHot:
    """A = (w *) ScatterElements(zeros, idx, U): the nodes computing it and their parts."""

    idx: str
    updates: str
    scale: str | None  # w, when A scales the scatter
    scale_first: bool  # Mul(w, S) rather than Mul(S, w): the row value keeps the operand order
    axis: int
    nodes: tuple[int, ...]  # the zeros' producer, the scatter, the scaling Mul (when there is one)
    row_sums: tuple[int, ...]  # the ReduceSums of A over the axis


def fuse_cross_entropy_gradients(data: bytes) -> bytes:
    """`data` (a serialized model) with every matched gradient fused (see the module doc); the
    bytes unchanged when nothing matches, so the digest of a graph without one stays the same."""
    model = onnx.ModelProto()
    model.ParseFromString(data)
    if default_opset(model) < REDUCTION_OPSET:
        return data
    graph = model.graph
    index = GraphIndex(graph)
    replaced: dict[int, list[onnx.NodeProto]] = {}
    dropped: set[int] = set()
    added: list[TensorProto] = []
    for k, node in enumerate(graph.node):
        if node.op_type != "Sub" or node.domain not in ("", "ai.onnx") or len(node.input) != 2:
            continue
        a, b = node.input
        found = _one_hot(index, a, k) if a != b else None
        if found is None or dropped & {*found.nodes, *found.row_sums}:
            continue
        dtype = index.shapes[a][0]
        row, zero = f"{a}/row", f"{node.output[0]}/zero"
        negated = f"{node.output[0]}/negated"
        if found.scale is None:
            row = found.updates
        else:  # the scaling Mul, last of found.nodes, now scales the one value per row
            operands = [found.scale, found.updates] if found.scale_first \
                else [found.updates, found.scale]
            replaced[found.nodes[-1]] = [helper.make_node(
                "Mul", operands, [row], name=f"{graph.node[found.nodes[-1]].name}/CrossEntropyRow")]
        for r in found.row_sums:
            old = graph.node[r]
            replaced[r] = [helper.make_node(
                "ReduceSum", [row, *old.input[1:]], list(old.output), name=old.name,
                keepdims=1, noop_with_empty_axes=0)]
        added.append(numpy_helper.from_array(np.zeros((), _FLOATS[dtype]), zero))
        replaced[k] = [
            helper.make_node("Sub", [zero, b], [negated], name=f"{node.name}/CrossEntropyNeg"),
            helper.make_node("ScatterElements", [negated, found.idx, row], list(node.output),
                             name=f"{node.name}/CrossEntropyScatter", axis=found.axis,
                             reduction="add"),
        ]
        dropped.update(n for n in found.nodes if n not in replaced)
    if not replaced:
        return data
    return splice(model, replaced, dropped, added)


def _one_hot(index: GraphIndex, a: str, sub: int) -> _OneHot | None:
    """A's one-hot form when `a` (read by the Sub at `sub`) is one (see the module doc)."""
    shapes = index.shapes
    shape = shapes.get(a)
    if shape is None or shape[0] not in _FLOATS:
        return None
    readers = index.readers(a)
    if a in index.outputs or sub not in readers:
        return None
    row_sums = tuple(r for r in readers if r != sub)
    scale: str | None = None
    scale_first, scatter_name = False, a
    nodes: tuple[int, ...] = ()
    mul = index.made_by(a, "Mul")
    if mul is not None and len(mul.input) == 2:
        for slot in (0, 1):
            if index.made_by(mul.input[slot], "ScatterElements") is not None:
                scatter_name, scale, scale_first = mul.input[slot], mul.input[1 - slot], slot == 1
                nodes = (index.producer[a],)
                break
        else:
            return None
    scatter = index.made_by(scatter_name, "ScatterElements")
    if scatter is None or len(scatter.input) != 3 or \
            (scale is not None and not index.once(scatter_name)) or \
            attribute(scatter, "reduction", b"none") not in (b"none", "none"):
        return None
    zeros, idx, updates = scatter.input
    rank = len(shape[1])
    axis = int(attribute(scatter, "axis", 0)) % max(rank, 1)  # type: ignore[call-overload]
    row = _row_shape(shape[1], axis)
    if shapes.get(scatter_name) != shape or not _zeros(index, zeros) or \
            not index.once(zeros) or shapes.get(idx, (0, ()))[1] != row or \
            shapes.get(updates) != (shape[0], row) or \
            (scale is not None and not _broadcasts(shapes.get(scale), shape[0], row)):
        return None
    if not all(_sums_rows(index, r, a, axis, rank) for r in row_sums):
        return None
    made = (index.producer[zeros],) if zeros in index.producer else ()
    return _OneHot(idx, updates, scale, scale_first, axis,
                   (*made, index.producer[scatter_name], *nodes), row_sums)


def _row_shape(dims: tuple[int, ...], axis: int) -> tuple[int, ...]:
    return tuple(1 if d == axis else n for d, n in enumerate(dims))


def _zeros(index: GraphIndex, name: str) -> bool:
    """`name` is all zeros: an initializer, Expand of a zero scalar initializer, or
    ConstantOfShape of zero (or of no value: zero)."""
    if name in index.initializers:
        return not np.any(numpy_helper.to_array(index.initializers[name]))
    expand = index.made_by(name, "Expand")
    if expand is not None:
        return scalar(index.initializers.get(expand.input[0])) == 0.0
    constant = index.made_by(name, "ConstantOfShape")
    if constant is None:
        return False
    value = attribute(constant, "value", None)
    return value is None or not np.any(numpy_helper.to_array(value))  # type: ignore[arg-type]


def _broadcasts(scale: tuple[int, tuple[int, ...]] | None, dtype: int,
                row: tuple[int, ...]) -> bool:
    """The scale broadcasts onto one row value per row (so onto A too), of A's type."""
    if scale is None or scale[0] != dtype or len(scale[1]) > len(row):
        return False
    return all(s in (1, r) for s, r in zip(reversed(scale[1]), reversed(row), strict=False))


def _sums_rows(index: GraphIndex, node: int, a: str, axis: int, rank: int) -> bool:
    """Node `node` is ReduceSum(a, axes=[axis], keepdims=1): the one row value per row."""
    reduce = index.graph.node[node]
    if reduce.op_type != "ReduceSum" or reduce.domain not in ("", "ai.onnx") or \
            list(reduce.input[:1]) != [a] or len(reduce.input) != 2 or \
            attribute(reduce, "keepdims", 1) != 1:
        return False
    axes = index.initializers.get(reduce.input[1])
    if axes is None:
        return False
    values = numpy_helper.to_array(axes).reshape(-1)
    return len(values) == 1 and int(values[0]) % rank == axis
