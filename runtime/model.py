"""The runtime's own light reading of an ONNX model: nodes by op id, initializers, value types.

The runtime never imports the planner, so it reads the model itself. Op ids are positions in the
model's node list after the topological sort the planner applies (schemas.topology: both call
the same function), after inlining model-local functions as the planner does.
For a sorted file (every exported model) that is simply the file order.

A plan made for ONNX Runtime's optimized graph (`plan.optimized_graph`) indexes that graph's
nodes: `model_for_plan` rebuilds it from the model's bytes, as the planner did
(schemas.optimized_graph), refuses it when its sha256 is not the plan's, and reads it in place of
the model's own graph (keeping the model's sha256 and bytes: the plan names the model, and the
whole-graph reference of `--check` runs the model as sent).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import ModelProto, NodeProto, numpy_helper

from runtime.errors import ModelMismatchError, ModelReadError
from schemas.optimized_graph import GraphOptimizationError, rebuild
from schemas.plan import Plan
from schemas.topology import CycleError, dataflow_order


@dataclass(frozen=True)
class ValueType:
    """Element type (onnx.TensorProto enum) and static shape of a graph input or output."""

    elem_type: int
    shape: tuple[int | None, ...]

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(self.elem_type))


@dataclass(frozen=True)
class RuntimeModel:
    """What the executor needs from a model, read once."""

    sha256: str
    nodes: tuple[NodeProto, ...]  # index = op id
    initializers: dict[str, np.ndarray]
    inputs: dict[str, ValueType]  # graph inputs that are not initializers, in file order
    outputs: dict[str, ValueType]
    types: dict[str, ValueType]  # every value whose type ONNX shape inference knows
    opset_imports: tuple[onnx.OperatorSetIdProto, ...]
    ir_version: int
    data: bytes  # the model bytes, for a whole-graph reference session
    graph_sha256: str  # of the graph the nodes come from: the model's own, or its rewrite

    def node(self, op_id: int) -> NodeProto:
        return self.nodes[op_id]


def read_model(source: str | Path | bytes) -> RuntimeModel:
    """Read a model from a path or bytes; a file that is not ONNX is a ModelReadError."""
    if isinstance(source, bytes | bytearray | memoryview):
        data = bytes(source)
    else:
        try:
            data = Path(source).read_bytes()
        except OSError as exc:
            raise ModelReadError(f"cannot read model {source}: {exc.strerror or exc}") from None
    sha256 = hashlib.sha256(data).hexdigest()
    return _read_graph(data, data, sha256, sha256)


def model_for_plan(model: RuntimeModel, plan: Plan) -> RuntimeModel:
    """The model whose nodes `plan` indexes: `model` itself, or the optimized graph the plan was
    made for, rebuilt here; a different rebuild is a ModelMismatchError naming both versions."""
    recorded = plan.optimized_graph
    if recorded is None or model.graph_sha256 == recorded.sha256:
        return model
    if plan.model_sha256 != model.sha256:
        return model  # the plan check refuses it, saying which model the plan is for
    try:
        rewritten = rebuild(model.data, recorded, plan.request.dims)
    except GraphOptimizationError as exc:
        raise ModelMismatchError(str(exc)) from None
    return _read_graph(rewritten, model.data, model.sha256, recorded.sha256)


def _read_graph(data: bytes, model_data: bytes, sha256: str, graph_sha256: str) -> RuntimeModel:
    """Read the graph in `data`; `model_data` and `sha256` are those of the model as sent."""
    proto = ModelProto()
    try:
        proto.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise ModelReadError(f"these bytes are not an ONNX model ({exc})") from None
    if not proto.HasField("graph") or not proto.graph.output:
        raise ModelReadError("these bytes are not an ONNX model (no graph outputs)")
    if proto.functions:
        from onnx import inliner

        proto = inliner.inline_local_functions(proto)
    nodes = sorted_nodes(list(proto.graph.node))
    graph = proto.graph
    initializers = {init.name: numpy_helper.to_array(init) for init in graph.initializer}
    inputs = {v.name: _value_type(v) for v in graph.input if v.name not in initializers}
    outputs = {v.name: _value_type(v) for v in graph.output}
    return RuntimeModel(
        sha256=sha256,
        nodes=tuple(nodes),
        initializers=initializers,
        inputs=inputs,
        outputs=outputs,
        types=_inferred_types(proto),
        opset_imports=tuple(proto.opset_import),
        ir_version=proto.ir_version,
        data=model_data,
        graph_sha256=graph_sha256,
    )


def sorted_nodes(nodes: list[NodeProto]) -> list[NodeProto]:
    """The planner's op order (schemas.topology), so that plan op ids name the same nodes; a
    cycle is refused."""
    try:
        order = dataflow_order([(node.input, node.output) for node in nodes])
    except CycleError:
        raise ModelReadError(
            "the model's graph has a cycle; a training step must be a DAG"
        ) from None
    return [nodes[i] for i in order]


def _inferred_types(proto: ModelProto) -> dict[str, ValueType]:
    """Types of graph inputs, outputs, initializers and (as far as inference gets) intermediates.

    Used to check that every buffer of a plan holds its tensor's exact dtype and shape; a model
    inference cannot fully type still runs, the check just covers fewer buffers.
    """
    try:
        inferred = onnx.shape_inference.infer_shapes(proto)
    except Exception:  # noqa: BLE001 - inference is a best-effort cross-check here
        inferred = proto
    graph = inferred.graph
    types = {
        v.name: _value_type(v)
        for v in [*graph.input, *graph.value_info, *graph.output]
        if v.type.HasField("tensor_type")
    }
    for init in graph.initializer:
        types[init.name] = ValueType(init.data_type, tuple(int(d) for d in init.dims))
    return types


def _value_type(value: onnx.ValueInfoProto) -> ValueType:
    tensor_type = value.type.tensor_type
    shape = tuple(
        int(d.dim_value) if d.HasField("dim_value") else None for d in tensor_type.shape.dim
    )
    return ValueType(elem_type=tensor_type.elem_type, shape=shape)
