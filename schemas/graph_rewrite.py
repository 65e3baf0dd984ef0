"""What our own rewrites of ONNX Runtime's optimized graph share (schemas.update_fusion,
schemas.loss_fusion): the static shapes and single reads a pattern must check, and the splice that
swaps matched nodes for their replacement while keeping the graph topologically sorted and free of
values and initializers nothing reads any more.

Both rewrites run inside schemas.optimized_graph.optimized_model, which the planner and the
runtime each call, so a plan's op ids index the same nodes on both sides.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from functools import cached_property

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

DEFAULT_DOMAINS = ("", "ai.onnx")
# Ops whose output is their first input's bytes under another shape: a `view` buffer of a plan is
# written by one of these, reading a buffer of the same storage, and the kernel writes nothing.
VIEW_OP_TYPES = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"})
Shape = tuple[int, tuple[int, ...]]  # (element type, static dims)


class GraphIndex:
    """Lookups over one graph that a pattern match needs: static shapes, producers, how often a
    value is read, initializers by name. Each is built when first asked for: a rewrite whose
    pattern the graph lacks asks for none (each took 20-70 ms on GPT-2-small's 4,245 nodes)."""

    def __init__(self, graph: onnx.GraphProto):
        self.graph = graph

    @cached_property
    def shapes(self) -> dict[str, Shape]:
        return static_shapes(self.graph)

    @cached_property
    def initializers(self) -> dict[str, TensorProto]:
        return {i.name: i for i in self.graph.initializer}

    @cached_property
    def reads(self) -> Counter[str]:
        return Counter(name for node in self.graph.node for name in node.input if name)

    @cached_property
    def outputs(self) -> set[str]:
        return {v.name for v in self.graph.output}

    @cached_property
    def producer(self) -> dict[str, int]:
        return {out: k for k, node in enumerate(self.graph.node) for out in node.output}

    @cached_property
    def _readers(self) -> dict[str, list[int]]:
        readers: dict[str, list[int]] = {}
        for k, node in enumerate(self.graph.node):
            for name in dict.fromkeys(node.input):
                readers.setdefault(name, []).append(k)
        return readers

    def once(self, name: str) -> bool:
        """Read by exactly one node and not a graph output: the value may disappear with it."""
        return self.reads[name] == 1 and name not in self.outputs

    def made_by(self, name: str, op_type: str) -> onnx.NodeProto | None:
        """The standard-domain `op_type` node writing `name`, if that is what writes it."""
        k = self.producer.get(name)
        if k is None:
            return None
        node = self.graph.node[k]
        return node if node.op_type == op_type and node.domain in DEFAULT_DOMAINS else None

    def position(self, name: str) -> int:
        """The index of the node writing `name`; -1 for a graph input or an initializer."""
        return self.producer.get(name, -1)

    def earliest(self, name: str) -> int:
        """The latest position among the inputs of the node writing `name`: that node may run
        right after it, wherever graph order puts it (-1 for a graph input, an initializer or a
        node reading only those)."""
        k = self.producer.get(name)
        if k is None:
            return -1
        return max((self.position(x) for x in self.graph.node[k].input if x), default=-1)

    def nbytes(self, name: str) -> int | None:
        """Bytes of `name` when its type and shape are static, else None."""
        shape = self.shapes.get(name)
        if shape is None:
            return None
        itemsize = helper.tensor_dtype_to_np_dtype(shape[0]).itemsize
        return int(np.prod(shape[1], dtype=np.int64)) * itemsize

    def readers(self, name: str) -> list[int]:
        """The nodes reading `name`, in graph order, each once (a lookup: a rewrite asks for
        every candidate, and a scan each time took 3.6 s on GPT-2-small's 4,245 nodes)."""
        return list(self._readers.get(name, ()))


def addend_comes_too_late(index: GraphIndex, factors: Sequence[str], addend: str,
                          product: str, fused: Collection[int]) -> bool:
    """Whether adding the product of `factors` (the value `product`) to `addend` in one Gemm
    holds more bytes than it saves (schemas.late_addend): that Gemm cannot run before the
    addend is made, so its factors live on until then. Apart, the product may run as soon as
    its factors exist; it is too late when, run then, the product frees more bytes (the factors
    no other node reads from then on) than it takes. Graph order, each node moved up to just
    after its latest input (GraphIndex.earliest), stands for the order the step runs in;
    `fused`: the nodes the one Gemm stands for (their reads do not count); unknown sizes never
    count as too late."""
    ready = max(index.earliest(x) for x in factors)
    if index.earliest(addend) <= ready:
        return False
    freed = 0
    for x in dict.fromkeys(factors):
        size = index.nbytes(x)
        if index.position(x) >= 0 and x not in index.outputs and size is not None and all(
                r <= ready for r in index.readers(x) if r not in fused):
            freed += size
    product_bytes = index.nbytes(product)
    return product_bytes is not None and freed > product_bytes


def attribute(node: onnx.NodeProto, name: str, default: object) -> object:
    found = [a for a in node.attribute if a.name == name]
    return helper.get_attribute_value(found[0]) if found else default


def number(node: onnx.NodeProto, name: str, default: float) -> float:
    """A numeric attribute of `node` (an int or a float), `default` when it has none."""
    value = attribute(node, name, default)
    assert isinstance(value, int | float), f"attribute {name} of {node.name} is not a number"
    return float(value)


def splice(model: onnx.ModelProto, replaced: Mapping[int, Sequence[onnx.NodeProto]],
           dropped: Collection[int], added: Sequence[TensorProto] = ()) -> bytes:
    """`model` with node k replaced by the nodes `replaced[k]` (in order, at k's place), the nodes
    `dropped` removed, `added` initializers added, and the value infos and initializers of values
    nothing reads any more removed. Replacements read only values written before k's place."""
    graph = model.graph
    kept = [new for k, node in enumerate(graph.node) if k not in dropped
            for new in replaced.get(k, (node,))]
    gone = {out for node in graph.node for out in node.output} - \
        {out for node in kept for out in node.output}
    del graph.node[:]
    graph.node.extend(kept)
    graph.initializer.extend(added)
    kept_info = [v for v in graph.value_info if v.name not in gone]
    del graph.value_info[:]
    graph.value_info.extend(kept_info)
    still_read = {name for node in graph.node for name in node.input}
    for init in [i for i in graph.initializer if i.name not in still_read]:
        graph.initializer.remove(init)
    return model.SerializeToString()


def static_shapes(graph: onnx.GraphProto) -> dict[str, Shape]:
    """Element type and shape of every value whose shape is fully known."""
    shapes: dict[str, Shape] = {}
    for value in (*graph.input, *graph.value_info, *graph.output):
        tensor = value.type.tensor_type
        if not tensor.HasField("shape"):
            continue
        dims = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in tensor.shape.dim)
        if all(d >= 0 for d in dims):
            shapes[value.name] = (tensor.elem_type, dims)
    for init in graph.initializer:
        shapes[init.name] = (init.data_type, tuple(init.dims))
    return shapes


def scalar(init: TensorProto | None) -> float | None:
    """The value of a one-element float32 initializer, else None."""
    if init is None or init.data_type != TensorProto.FLOAT or int(np.prod(init.dims)) != 1:
        return None
    return float(numpy_helper.to_array(init).reshape(()))


def default_opset(model: onnx.ModelProto) -> int:
    """The standard domain's opset version the model imports (0 when it imports none)."""
    return max((o.version for o in model.opset_import if o.domain in DEFAULT_DOMAINS), default=0)
