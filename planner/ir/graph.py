"""The planner's graph IR: the ops and tensors of one ONNX training step, with exact byte sizes.

`load_graph(model, dims=...)` is the only way in. It checks the model (planner.ir.onnx_model), then
records for every op its id (= position in a topological file order), type, attributes and tensor
ids, and for every tensor its dtype, static shape, exact byte size, producer, consumers and role.
Roles and the forward/backward/optimizer regions come from graph structure (planner.ir.roles), so
graphs from any exporter are understood the same way.

The IR is immutable; solvers index it by integer ids (`graph.ops[i]`, `graph.tensors[t]`).
"""

from __future__ import annotations

import hashlib
import math
import weakref
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from enum import Enum
from functools import cached_property, wraps
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

import numpy as np
import onnx
from onnx import ModelProto, TensorProto, helper, numpy_helper

from planner.errors import UnknownShapeError, UnsupportedOperatorError
from planner.ir import roles as role_analysis
from planner.ir.onnx_model import check_structure, load_checked_model, read_model_bytes, shaped
from planner.ir.optimized import check_state_kept, optimize_for_request, rebuild_recorded
from schemas.optimized_graph import GraphOptimization, OptimizedGraph

if TYPE_CHECKING:
    from schemas.plan import Plan


class TensorRole(str, Enum):
    """What a tensor is in a training step; decides how long it must live and where."""

    DATA = "data"
    LABEL = "label"
    PARAMETER = "parameter"
    OPTIMIZER_STATE = "optimizer_state"
    BUFFER = "buffer"  # non-trained state updated in the step, e.g. batch-norm running stats
    CONSTANT = "constant"  # initializers and other values fixed in the model
    ACTIVATION = "activation"  # produced by the forward region
    GRADIENT = "gradient"  # produced by the backward region
    OPTIMIZER_TEMP = "optimizer_temp"  # intermediate of the optimizer (state-update) region
    OUTPUT = "output"  # graph outputs: the loss and the updated state


class Region(str, Enum):
    FORWARD = "forward"
    BACKWARD = "backward"
    OPTIMIZER = "optimizer"


# Bits per element of every tensor type ONNX defines with a fixed width.
_ELEMENT_BITS: dict[int, int] = {
    TensorProto.FLOAT: 32, TensorProto.UINT8: 8, TensorProto.INT8: 8, TensorProto.UINT16: 16,
    TensorProto.INT16: 16, TensorProto.INT32: 32, TensorProto.INT64: 64, TensorProto.BOOL: 8,
    TensorProto.FLOAT16: 16, TensorProto.DOUBLE: 64, TensorProto.UINT32: 32,
    TensorProto.UINT64: 64, TensorProto.COMPLEX64: 64, TensorProto.COMPLEX128: 128,
    TensorProto.BFLOAT16: 16, TensorProto.FLOAT8E4M3FN: 8, TensorProto.FLOAT8E4M3FNUZ: 8,
    TensorProto.FLOAT8E5M2: 8, TensorProto.FLOAT8E5M2FNUZ: 8, TensorProto.UINT4: 4,
    TensorProto.INT4: 4,
}


@dataclass(frozen=True)
class Tensor:
    id: int
    name: str
    dtype: str  # numpy-style name, e.g. "float32", "int64"
    elem_type: int  # onnx.TensorProto data type enum
    shape: tuple[int, ...]
    nbytes: int
    producer: int | None  # op id, None for graph inputs and initializers
    consumers: tuple[int, ...]  # op ids in execution order, each once
    role: TensorRole
    is_graph_input: bool
    is_graph_output: bool
    is_initializer: bool
    updates: int | None = None  # for an updated-state output: the input tensor it replaces
    updated_by: int | None = None  # for a state input: the output holding its new value

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def known_producer(self) -> int:
        """`producer` of a tensor the caller knows an op writes (not an input or a constant)."""
        assert self.producer is not None, f"tensor '{self.name}' is written by no op"
        return self.producer


@dataclass(frozen=True)
class Op:
    id: int
    name: str
    op_type: str
    domain: str
    attributes: Mapping[str, Any] = field(repr=False)
    inputs: tuple[int | None, ...]  # positional; None marks an omitted optional input
    outputs: tuple[int | None, ...]
    region: Region

    # Every phase reads these of every op, the first reader before ordering starts: made
    # without a generator where they can be (a quarter less time on 20,000 ops).
    @cached_property
    def input_ids(self) -> tuple[int, ...]:
        """Distinct present inputs, in positional order."""
        present = dict.fromkeys(self.inputs)
        present.pop(None, None)
        return cast(tuple[int, ...], tuple(present))

    @cached_property
    def output_ids(self) -> tuple[int, ...]:
        if None in self.outputs:
            return tuple(t for t in self.outputs if t is not None)
        return cast(tuple[int, ...], self.outputs)


@dataclass(frozen=True, eq=False)  # one graph is one loaded model: compared and hashed by identity
class Graph:
    name: str
    ops: tuple[Op, ...]
    tensors: tuple[Tensor, ...]
    inputs: tuple[int, ...]  # graph inputs (not initializers), in file order
    outputs: tuple[int, ...]
    loss: int | None
    opset: int
    ir_version: int
    model_sha256: str  # of the model as sent; plan ids and profiles name it
    proto: ModelProto = field(repr=False, compare=False)
    optimized: OptimizedGraph | None = None  # the ops are ONNX Runtime's rewrite of that model
    # Of a rewrite only: per op, the position in the model as sent of the op with the same name
    # (None: an op ONNX Runtime made); the orderers start from the exporter's order with it.
    source_positions: tuple[int | None, ...] = ()

    def tensor(self, name: str) -> Tensor:
        try:
            return self.tensors[self._ids_by_name[name]]
        except KeyError:
            raise KeyError(f"no tensor named '{name}' in graph '{self.name}'") from None

    @cached_property
    def _ids_by_name(self) -> dict[str, int]:
        return {t.name: t.id for t in self.tensors}

    def tensors_with_role(self, *roles: TensorRole) -> list[Tensor]:
        return [t for t in self.tensors if t.role in roles]

    def bytes_by_role(self) -> dict[str, int]:
        totals = {role.value: 0 for role in TensorRole}
        for t in self.tensors:
            totals[t.role.value] += t.nbytes
        return totals

    def parameter_count(self) -> int:
        return sum(t.numel for t in self.tensors if t.role is TensorRole.PARAMETER)


def load_graph(model: str | Path | bytes | ModelProto, dims: Mapping[str, int] | None = None,
               optimization: GraphOptimization = "disable", devices: Sequence[str] = ("cpu",),
               late_recompute: bool = True) -> Graph:
    """Load an ONNX model (path, bytes or ModelProto) into the IR, binding symbolic `dims`.

    With `optimization` on, the IR is the graph ONNX Runtime rewrites the (checked) model into
    for the providers of `devices` (planner.ir.optimized; with schemas.late_recompute's copies
    unless `late_recompute` is off); `model_sha256` stays the model's.
    """
    data = model.SerializeToString() if isinstance(model, ModelProto) else read_model_bytes(model)
    if optimization == "disable":
        loaded = load_checked_model(data, dims)
        return _build(loaded.proto, loaded.sha256, loaded.opset)
    return _beside_rewrite(data, dims, lambda: optimize_for_request(
        data, optimization, devices, dims or {}, late_recompute))


def load_plan_graph(model: str | Path | bytes | ModelProto, plan: Plan) -> Graph:
    """The IR of the graph `plan` was made for: the model itself, or ONNX Runtime's rewrite of it
    as the plan records it (refused when this ONNX Runtime rewrites it into another graph)."""
    data = model.SerializeToString() if isinstance(model, ModelProto) else read_model_bytes(model)
    dims = plan.request.dims
    recorded = plan.optimized_graph
    if recorded is None or hashlib.sha256(data).hexdigest() != plan.model_sha256:
        loaded = load_checked_model(data, dims)  # another model: the validator says so
        return _build(loaded.proto, loaded.sha256, loaded.opset)
    return _beside_rewrite(data, dims,
                           lambda: (rebuild_recorded(data, recorded, dims), recorded))


def _beside_rewrite(data: bytes, dims: Mapping[str, int] | None,
                    rewrite: Callable[[], tuple[bytes, OptimizedGraph]]) -> Graph:
    """The IR of ONNX Runtime's rewrite of `data`, made by `rewrite` in a thread while the model
    as sent is shape-inferred and built here (its state and source positions carry over).

    The rewrite starts once the model's structure passed its checks, so ONNX Runtime never sees
    bytes they refuse; its session build holds no Python lock, so the two overlap (GPT-2-small:
    the model as sent takes 0.5-0.6 s of the 2-3 s load, now beside the rewrite). When the model
    as sent fails shape inference, that error is raised once the rewrite has ended."""
    checked = check_structure(data)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="arenaplan-rewrite") as pool:
        rewriting = pool.submit(rewrite)
        loaded = shaped(checked, dims)
        original = _build(loaded.proto, loaded.sha256, loaded.opset)
        rewritten, recorded = rewriting.result()
    return _optimized(original, rewritten, recorded)


def _optimized(original: Graph, rewritten: bytes, recorded: OptimizedGraph) -> Graph:
    loaded = load_checked_model(rewritten, optimized=True)  # dims bound by ONNX Runtime
    state = {original.tensors[t.id].name: original.tensors[t.updated_by].name
             for t in original.tensors if t.updated_by is not None}
    check_state_kept(state, loaded.proto, recorded.level)
    graph = _build(loaded.proto, original.model_sha256, loaded.opset, recorded, state)
    return replace(graph, source_positions=_source_positions(original.proto, loaded.proto))


def _source_positions(sent: ModelProto, rewritten: ModelProto) -> tuple[int | None, ...]:
    """Per node of `rewritten`, the index of the node of `sent` with the same name (ONNX
    Runtime keeps the names of the nodes it does not fuse away); unnamed or repeated names
    match nothing."""
    names = Counter(node.name for node in sent.graph.node)
    index = {node.name: k for k, node in enumerate(sent.graph.node)
             if node.name and names[node.name] == 1}
    return tuple(index.get(node.name) for node in rewritten.graph.node)


def _build(proto: ModelProto, sha256: str, opset: int,
           optimized: OptimizedGraph | None = None, state: Mapping[str, str] | None = None
           ) -> Graph:
    """The IR of a checked model; `state` (input name -> output name) gives the state updates
    instead of finding them (planner.ir.roles)."""
    g = proto.graph
    typed = _value_types(proto)
    initializer_names = {init.name for init in g.initializer}
    input_names = [v.name for v in g.input if v.name not in initializer_names]
    output_names = [v.name for v in g.output]

    names: list[str] = []
    ids: dict[str, int] = {}

    def tensor_id(name: str) -> int:
        if name not in ids:
            ids[name] = len(names)
            names.append(name)
        return ids[name]

    for name in [*input_names, *(i.name for i in g.initializer)]:
        tensor_id(name)
    producer: dict[int, int] = {}
    raw_ops = []
    for index, node in enumerate(g.node):
        ins = tuple(tensor_id(n) if n else None for n in node.input)
        outs = tuple(tensor_id(n) if n else None for n in node.output)
        for t in outs:
            if t is not None:
                producer[t] = index
        raw_ops.append((node, ins, outs))
    for name in output_names:
        tensor_id(name)

    consumers: list[list[int]] = [[] for _ in names]
    for index, (_, ins, _) in enumerate(raw_ops):
        for t in dict.fromkeys(x for x in ins if x is not None):
            consumers[t].append(index)

    elem_types, shapes = [], []
    for t, name in enumerate(names):
        if name not in typed:
            where = f"output of op #{producer[t]}" if t in producer else "a graph input"
            raise UnknownShapeError(
                f"tensor '{name}' ({where}) has no inferred type/shape; give the model static "
                "shapes or bind its symbolic dims"
            )
        elem_type, shape = typed[name]
        elem_types.append(elem_type)
        shapes.append(shape)

    analysis = role_analysis.analyze(
        role_analysis.Structure(
            op_types=[node.op_type for node, _, _ in raw_ops],
            op_inputs=[tuple(x for x in ins if x is not None) for _, ins, _ in raw_ops],
            op_outputs=[tuple(x for x in outs if x is not None) for _, _, outs in raw_ops],
            producer=[producer.get(t) for t in range(len(names))],
            consumers=consumers,
            shapes=shapes,
            is_float=[_is_float(e) for e in elem_types],
            graph_inputs=[ids[n] for n in input_names],
            graph_outputs=[ids[n] for n in output_names],
            initializers={ids[n] for n in initializer_names},
        ),
        known_updates=None if state is None else {ids[i]: ids[o] for i, o in state.items()},
    )

    output_set = {ids[n] for n in output_names}
    input_set = {ids[n] for n in input_names}
    updated_by = {i: o for i, o in analysis.updates.items()}
    updates = {o: i for i, o in analysis.updates.items()}
    tensors = tuple(
        Tensor(
            id=t,
            name=names[t],
            dtype=_dtype_name(elem_types[t]),
            elem_type=elem_types[t],
            shape=shapes[t],
            nbytes=_nbytes(names[t], elem_types[t], shapes[t]),
            producer=producer.get(t),
            consumers=tuple(consumers[t]),
            role=TensorRole(analysis.tensor_roles[t]),
            is_graph_input=t in input_set,
            is_graph_output=t in output_set,
            is_initializer=names[t] in initializer_names,
            updates=updates.get(t),
            updated_by=updated_by.get(t),
        )
        for t in range(len(names))
    )
    ops = tuple(
        Op(
            id=index,
            name=node.name or f"{node.op_type}_{index}",
            op_type=node.op_type,
            domain=node.domain or "",
            attributes=_attributes(node),
            inputs=ins,
            outputs=outs,
            region=Region(analysis.op_regions[index]),
        )
        for index, (node, ins, outs) in enumerate(raw_ops)
    )
    return Graph(
        name=g.name or "model",
        ops=ops,
        tensors=tensors,
        inputs=tuple(ids[n] for n in input_names),
        outputs=tuple(ids[n] for n in output_names),
        loss=analysis.loss,
        opset=opset,
        ir_version=proto.ir_version,
        model_sha256=sha256,
        proto=proto,
        optimized=optimized,
    )


def _value_types(proto: ModelProto) -> dict[str, tuple[int, tuple[int, ...]]]:
    """Element type and static shape of every typed value; dims must all be known."""
    g = proto.graph
    found: dict[str, tuple[int, tuple[int, ...]]] = {}
    for init in g.initializer:
        found[init.name] = (init.data_type, tuple(int(d) for d in init.dims))
    for value in [*g.input, *g.value_info, *g.output]:
        if value.name in found or not value.type.HasField("tensor_type"):
            if value.name and not value.type.HasField("tensor_type") and value.type.ListFields():
                raise UnsupportedOperatorError(
                    f"value '{value.name}' is not a tensor (sequence/map/optional types are not "
                    "supported)"
                )
            continue
        tensor_type = value.type.tensor_type
        if not tensor_type.HasField("shape"):
            raise UnknownShapeError(f"tensor '{value.name}' has unknown rank; give it a shape")
        dims = []
        for axis, dim in enumerate(tensor_type.shape.dim):
            if dim.HasField("dim_value"):
                dims.append(int(dim.dim_value))
                continue
            label = f"symbolic dim '{dim.dim_param}'" if dim.dim_param else "an unknown dim"
            hint = (
                f"bind it with dims={{'{dim.dim_param}': N}} (CLI: --dim {dim.dim_param}=N)"
                if dim.dim_param
                else "give the model static shapes"
            )
            raise UnknownShapeError(
                f"tensor '{value.name}' has {label} at axis {axis}, so its size is unknown; {hint}"
            )
        found[value.name] = (tensor_type.elem_type, tuple(dims))
    for node in g.node:
        if node.op_type == "Constant":
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.TENSOR and node.output[0] not in found:
                    found[node.output[0]] = (attr.t.data_type, tuple(int(d) for d in attr.t.dims))
    return found


def _is_float(elem_type: int) -> bool:
    return elem_type in (
        TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BFLOAT16,
    )


def _dtype_name(elem_type: int) -> str:
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)).name
    except (KeyError, TypeError, ValueError):
        return TensorProto.DataType.Name(elem_type).lower()


def _nbytes(name: str, elem_type: int, shape: tuple[int, ...]) -> int:
    bits = _ELEMENT_BITS.get(elem_type)
    if bits is None:
        raise UnsupportedOperatorError(
            f"tensor '{name}' has type {TensorProto.DataType.Name(elem_type)}, whose size is not "
            "fixed; only numeric and bool tensors can be planned"
        )
    return (math.prod(shape) * bits + 7) // 8


def _attributes(node: onnx.NodeProto) -> dict[str, Any]:
    """Attribute values as plain Python (tensors as numpy arrays, strings decoded)."""
    values: dict[str, Any] = {}
    for attr in node.attribute:
        value = helper.get_attribute_value(attr)
        if isinstance(value, bytes):
            value = value.decode("utf-8", errors="replace")
        elif isinstance(value, TensorProto):
            value = numpy_helper.to_array(value)
        elif isinstance(value, list) and value and isinstance(value[0], bytes):
            value = [v.decode("utf-8", errors="replace") for v in value]
        values[attr.name] = value
    return values


_Analysis = TypeVar("_Analysis")


def per_graph(analyze: Callable[[Graph], _Analysis]) -> Callable[[Graph], _Analysis]:
    """`analyze` computed once per graph and kept while the graph lives: a graph is immutable
    and hashed by identity, and the phases of one request ask for the same analyses (the
    request check, ordering, remat and the plan builder)."""
    found: weakref.WeakKeyDictionary[Graph, _Analysis] = weakref.WeakKeyDictionary()

    @wraps(analyze)
    def once(graph: Graph) -> _Analysis:
        if graph not in found:
            found[graph] = analyze(graph)
        return found[graph]
    return once
