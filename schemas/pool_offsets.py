"""Replace the 1x1 MaxPool that torch's export runs only to learn each plane's flat offset with
that offset as a constant.

Why: ONNX MaxPool returns flat indices into the whole input (batch and channel included), while
torch's `max_pool2d_with_indices` returns them per plane. The exporter converts by subtracting
each (n, c) plane's first flat index, which it computes at run time:

    _, I = MaxPool(X, kernel_shape=1, strides=1)      I: int64, X's shape
    offsets = Slice(I, starts=0, ends=1, axes=spatial) offsets[n, c, 0, ...] = (n*C + c) * H*W

That 1x1 pool writes an int64 copy of X's shape (twice X's float32 bytes) and an unread float
copy of X, only for N*C numbers that depend on the shape alone. On ResNet-18 at 64x64 batch 16
that is 12 MiB written beside a 4 MiB activation, and on the CNN fixture it is the op with the
largest footprint (state plus its operands: 262 KiB of 276 KiB, the op-footprint bound). The
offsets become an initializer of N*C int64 values: the same integers, so every result is
bit-identical, and no op runs. Constant folding stays off otherwise (schemas.optimized_graph:
constants live all step); these are N*C / (N*C*H*W) of the indices' size.

Matched: a standard-domain MaxPool with all-ones kernel and strides, no padding, dilations 1,
row-major indices (storage_order 0), a statically shaped input of rank 3 or more, its values
output unread or absent, its indices read only by Slice nodes taking element 0 of every spatial
axis (starts 0, ends 1, steps 1, as initializers).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from schemas.graph_rewrite import DEFAULT_DOMAINS, GraphIndex, attribute, splice


def fold_pool_offsets(data: bytes) -> bytes:
    """`data` (a serialized model) with every matched offset computation replaced by its
    constant (see the module doc); the bytes unchanged when nothing matches."""
    model = onnx.ModelProto()
    model.ParseFromString(data)
    index = GraphIndex(model.graph)
    nodes = model.graph.node
    dropped: set[int] = set()
    added: list[TensorProto] = []
    renamed: dict[str, str] = {}  # a Slice's output -> the constant now holding it
    for k, node in enumerate(nodes):
        dims = _unit_pool_input(index, node)
        if dims is None:
            continue
        slices = index.readers(node.output[1])
        if not slices or not all(_first_of_each_plane(index, s, len(dims)) for s in slices):
            continue
        planes = dims[0] * dims[1]
        offsets = (np.arange(planes, dtype=np.int64) * int(np.prod(dims[2:]))).reshape(
            (dims[0], dims[1], *([1] * (len(dims) - 2))))
        name = f"{node.output[1]}/plane_offsets"
        added.append(numpy_helper.from_array(offsets, name))
        for s in slices:
            renamed[nodes[s].output[0]] = name
        dropped.update([k, *slices])
    if not dropped:
        return data
    for node in nodes:
        for j, name in enumerate(node.input):
            if name in renamed:
                node.input[j] = renamed[name]
    return splice(model, {}, dropped, added)


def _unit_pool_input(index: GraphIndex, node: onnx.NodeProto) -> tuple[int, ...] | None:
    """The static input shape of a 1x1, stride-1 MaxPool returning row-major indices whose
    values output nobody reads; None for any other node."""
    if node.op_type != "MaxPool" or node.domain not in DEFAULT_DOMAINS or \
            len(node.output) != 2 or not node.output[1]:
        return None
    shape = index.shapes.get(node.input[0])
    if shape is None or len(shape[1]) < 3:
        return None
    spatial = len(shape[1]) - 2
    ones = [1] * spatial

    def ints(name: str, default: list[int]) -> list[int]:
        return [int(v) for v in attribute(node, name, default)]  # type: ignore[attr-defined]

    if ints("kernel_shape", []) != ones or ints("strides", ones) != ones or \
            ints("dilations", ones) != ones or any(ints("pads", [0] * 2 * spatial)) or \
            attribute(node, "auto_pad", b"NOTSET") not in (b"NOTSET", b"VALID") or \
            attribute(node, "storage_order", 0) != 0:
        return None
    values = node.output[0]
    if values and (index.reads[values] or values in index.outputs):
        return None
    return shape[1]


def _first_of_each_plane(index: GraphIndex, node_index: int, rank: int) -> bool:
    """Node `node_index` is Slice(indices, 0, 1, every spatial axis[, steps 1]), its output not
    a graph output."""
    node = index.graph.node[node_index]
    if node.op_type != "Slice" or node.domain not in DEFAULT_DOMAINS or \
            len(node.input) not in (4, 5) or node.output[0] in index.outputs:
        return False
    starts, ends, axes, *steps = (_ints(index, name) for name in node.input[1:])
    if starts is None or ends is None or axes is None or any(s is None for s in steps):
        return False
    spatial = list(range(2, rank))
    return sorted(a % rank for a in axes) == spatial and len(starts) == len(ends) == len(axes) \
        and set(starts) == {0} and set(ends) == {1} and all(set(s or [1]) == {1} for s in steps)


def _ints(index: GraphIndex, name: str) -> list[int] | None:
    init = index.initializers.get(name)
    if init is None or init.data_type not in (TensorProto.INT64, TensorProto.INT32):
        return None
    return [int(v) for v in numpy_helper.to_array(init).reshape(-1)]
