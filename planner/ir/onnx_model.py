"""Turn untrusted bytes into a checked, fully shaped ONNX ModelProto, or a typed error.

Every refusal names what to change. The order of the checks matters: cheap structural checks that
give precise messages (versions, external data, control flow, cycles) run before the generic ONNX
checker, whose messages are harder to act on. Nothing here ever reads a file the model points to.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError
from onnx import ModelProto, TensorProto

from planner.errors import (
    ExternalDataError,
    GraphCycleError,
    ModelCheckError,
    NotOnnxError,
    UnknownShapeError,
    UnsupportedOperatorError,
    UnsupportedVersionError,
)
from schemas.optimized_graph import CONTRIB_DOMAIN, FUSED_OPS, is_fused_op
from schemas.topology import CycleError, dataflow_order

# IR versions onnxruntime 1.31 loads (13 is its newest; below 4 initializers had to be inputs).
SUPPORTED_IR_VERSIONS = range(4, 14)
# Default-domain opsets: 13 is where the training ops we rely on (ReduceSum with axes as input,
# Split with sizes as input) took their current form; 25 is the newest onnxruntime 1.31 runs.
SUPPORTED_OPSETS = range(13, 26)
DEFAULT_DOMAINS = ("", "ai.onnx")
# Operators whose bodies are subgraphs: their memory and time depend on data, so no static plan.
CONTROL_FLOW_OPS = frozenset({"If", "Loop", "Scan", "SequenceMap"})


@dataclass(frozen=True)
class LoadedModel:
    """A model that passed every check, with its shapes inferred and symbolic dims bound."""

    proto: ModelProto
    sha256: str
    opset: int


def read_model_bytes(source: str | Path | bytes) -> bytes:
    """Bytes of a model given as bytes or a path; a missing file is a clear error."""
    if isinstance(source, bytes | bytearray | memoryview):
        return bytes(source)
    path = Path(source)
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise NotOnnxError(f"model file not found: {path}") from None
    except IsADirectoryError:
        raise NotOnnxError(f"model path is a directory, not an ONNX file: {path}") from None


@dataclass(frozen=True)
class CheckedStructure:
    """A model whose structure passed every check (versions, external data, ops, cycles, the
    ONNX checker), its shapes not yet inferred: safe to hand to ONNX Runtime."""

    proto: ModelProto
    sha256: str
    opset: int
    optimized: bool


def load_checked_model(data: bytes, dims: Mapping[str, int] | None = None, *,
                       optimized: bool = False) -> LoadedModel:
    """Parse, validate and shape-infer a model; bind symbolic dimensions from `dims`.

    `optimized`: the bytes are ONNX Runtime's rewrite of a checked model
    (schemas.optimized_graph), which may hold its fused ops; a model as sent holds standard ops.
    Raises the specific `planner.errors` type for each way a model can be unusable.
    """
    return shaped(check_structure(data, optimized=optimized), dims)


def check_structure(data: bytes, *, optimized: bool = False) -> CheckedStructure:
    """The first half of load_checked_model: every check but shape inference."""
    proto = _parse(data)
    opset = _check_versions(proto)
    _refuse_external_data(proto)
    _refuse_unsupported_ops(proto, optimized)
    proto = _inline_functions(proto)
    _refuse_empty_graph(proto.graph)
    _sort_topologically_or_refuse_cycles(proto.graph)
    _refuse_negative_dims(proto.graph)
    _run_checker(proto)
    return CheckedStructure(proto, hashlib.sha256(data).hexdigest(), opset, optimized)


def shaped(checked: CheckedStructure, dims: Mapping[str, int] | None = None) -> LoadedModel:
    """The second half of load_checked_model: `dims` bound, shapes inferred (strictly). Changes
    `checked.proto`."""
    _bind_dims(checked.proto, dict(dims or {}))
    proto = _infer_shapes(checked.proto, data_prop=not checked.optimized)
    return LoadedModel(proto=proto, sha256=checked.sha256, opset=checked.opset)


def _parse(data: bytes) -> ModelProto:
    if not data:
        raise NotOnnxError("the model is empty (0 bytes); send an .onnx file")
    proto = ModelProto()
    try:
        proto.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise NotOnnxError(f"these bytes are not an ONNX model (protobuf: {exc})") from None
    # Protobuf accepts many random byte strings as a message of unknown fields; a real model
    # always has an IR version and a graph with at least one output.
    if proto.ir_version <= 0 or not proto.HasField("graph") or not proto.graph.output:
        raise NotOnnxError(
            "these bytes are not an ONNX model (no IR version or no graph outputs); "
            "export the model with torch.onnx.export or onnx.save"
        )
    return proto


def _check_versions(proto: ModelProto) -> int:
    if proto.ir_version not in SUPPORTED_IR_VERSIONS:
        raise UnsupportedVersionError(
            f"ONNX IR version {proto.ir_version} is not supported; supported: "
            f"{SUPPORTED_IR_VERSIONS.start}..{SUPPORTED_IR_VERSIONS.stop - 1} "
            "(save with onnx.helper.make_model(..., ir_version=10))"
        )
    opsets = {imp.domain: imp.version for imp in proto.opset_import}
    default = [opsets[d] for d in DEFAULT_DOMAINS if d in opsets]
    if not default:
        raise UnsupportedVersionError("the model imports no default-domain ('ai.onnx') opset")
    opset = default[0]
    if opset not in SUPPORTED_OPSETS:
        raise UnsupportedVersionError(
            f"ai.onnx opset {opset} is not supported; supported: "
            f"{SUPPORTED_OPSETS.start}..{SUPPORTED_OPSETS.stop - 1} "
            "(convert with onnx.version_converter.convert_version)"
        )
    return opset


def _is_external(tensor: TensorProto) -> bool:
    return tensor.data_location == TensorProto.EXTERNAL or len(tensor.external_data) > 0


def _refuse_external_data(proto: ModelProto) -> None:
    for init in proto.graph.initializer:
        if _is_external(init):
            raise ExternalDataError(
                f"initializer '{init.name}' keeps its data in an external file; the planner "
                "never reads files a model points to: save the model with all data inside "
                "(onnx.save(model, path, save_as_external_data=False))"
            )
    for node in proto.graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.TENSOR and _is_external(attr.t):
                raise ExternalDataError(
                    f"node '{node.name or node.op_type}' has a tensor attribute '{attr.name}' "
                    "stored in an external file; embed the data in the model"
                )


def _refuse_unsupported_ops(proto: ModelProto, optimized: bool = False) -> None:
    local_functions = {(f.domain, f.name) for f in proto.functions}
    for index, node in enumerate(proto.graph.node):
        label = node.name or f"#{index}"
        if node.op_type in CONTROL_FLOW_OPS or any(
            a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
            for a in node.attribute
        ):
            raise UnsupportedOperatorError(
                f"node {label} is a control-flow op ({node.op_type}); control flow is not "
                "supported yet: export the training step with loops unrolled"
            )
        if node.domain in DEFAULT_DOMAINS or (node.domain, node.op_type) in local_functions:
            continue
        if optimized and not is_fused_op(node.domain, node.op_type):
            raise UnsupportedOperatorError(
                f"ONNX Runtime's optimizations wrote node {label}, op {node.op_type} from domain "
                f"'{node.domain}', which arenaplan does not plan (it plans {CONTRIB_DOMAIN} "
                f"{', '.join(sorted(FUSED_OPS))}); plan with graph optimization 'basic' "
                "(--graph-optimization basic)"
            )
        if not optimized:
            raise UnsupportedOperatorError(
                f"node {label} uses op {node.op_type} from domain '{node.domain}'; only standard "
                "ONNX ops (ai.onnx) are supported, so that plain onnxruntime can run every step "
                "(ONNX Runtime's fused ops come from planning with graph optimization on)"
            )


def _inline_functions(proto: ModelProto) -> ModelProto:
    """Replace calls to model-local functions by their bodies so the IR sees real ops only."""
    if not proto.functions:
        return proto
    _refuse_recursive_functions(proto)
    from onnx import inliner

    inlined = inliner.inline_local_functions(proto)
    _refuse_unsupported_ops(inlined)
    return inlined


def _refuse_recursive_functions(proto: ModelProto) -> None:
    """A model-local function that calls itself, directly or through others, cannot be inlined:
    name the call cycle (f -> g -> f) instead of letting the inliner fail."""
    calls = {(f.domain, f.name): [(n.domain, n.op_type) for n in f.node] for f in proto.functions}

    def cycle_from(path: list[tuple[str, str]]) -> list[tuple[str, str]] | None:
        for callee in calls[path[-1]]:
            if callee in path:
                return [*path[path.index(callee):], callee]
            if callee in calls:
                found = cycle_from([*path, callee])
                if found:
                    return found
        return None

    for function in calls:
        cycle = cycle_from([function])
        if cycle:
            names = " -> ".join(f"{domain}::{name}" for domain, name in cycle)
            raise GraphCycleError(
                f"model-local functions call themselves ({names}); a training step needs a "
                "fixed set of ops: export it with the recursion unrolled"
            )


def _refuse_empty_graph(graph: onnx.GraphProto) -> None:
    if not graph.node:
        raise ModelCheckError(
            "the graph has no nodes, so there is no training step to plan; export the whole "
            "step (forward, backward and optimizer update) as one graph"
        )


def _refuse_negative_dims(graph: onnx.GraphProto) -> None:
    """A declared dimension below 0 sizes no tensor (the checker lets it through)."""
    for kind, values in (("input", graph.input), ("output", graph.output),
                         ("value", graph.value_info)):
        for value_info in values:
            dims = value_info.type.tensor_type.shape.dim
            for axis, dim in enumerate(dims):
                if dim.HasField("dim_value") and dim.dim_value < 0:
                    raise UnknownShapeError(
                        f"{kind} '{value_info.name}' has dimension {dim.dim_value} at axis "
                        f"{axis}; dimensions are sizes (0 or more): fix the exported shape, or "
                        "make it a named dim and give its value in dims"
                    )


def _sort_topologically_or_refuse_cycles(graph: onnx.GraphProto) -> None:
    """Put nodes in the one topological order (schemas.topology) or name a cycle.

    ONNX requires sorted nodes, but some writers emit acyclic graphs out of order; those are
    fine to plan. A real cycle has no execution order at all.
    """
    nodes = list(graph.node)
    produced = [{name for name in node.output if name} for node in nodes]
    self_loops = [i for i, node in enumerate(nodes) if produced[i] & set(node.input)]
    if self_loops:
        raise GraphCycleError(
            f"the graph has a cycle: node {_node_label(nodes, self_loops[0])} reads its own output"
        )
    try:
        order = dataflow_order([(node.input, node.output) for node in nodes])
    except CycleError as exc:
        names = " -> ".join(_node_label(nodes, i) for i in exc.args[1])
        raise GraphCycleError(
            f"the graph has a cycle: {names}; a training step must be a DAG"
        ) from None
    if order != list(range(len(nodes))):
        del graph.node[:]
        graph.node.extend(nodes[i] for i in order)


def _node_label(nodes: list[onnx.NodeProto], index: int) -> str:
    node = nodes[index]
    return f"'{node.name}' ({node.op_type})" if node.name else f"#{index} ({node.op_type})"


def _run_checker(proto: ModelProto) -> None:
    try:
        onnx.checker.check_model(proto)
    except onnx.checker.ValidationError as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
        raise ModelCheckError(f"the model fails the ONNX checker: {first_line}") from None


def _symbolic_dims(proto: ModelProto) -> set[str]:
    names: set[str] = set()
    for value in [*proto.graph.input, *proto.graph.output, *proto.graph.value_info]:
        if value.type.HasField("tensor_type"):
            for dim in value.type.tensor_type.shape.dim:
                if dim.HasField("dim_param"):
                    names.add(dim.dim_param)
    return names


def _bind_dims(proto: ModelProto, dims: dict[str, int]) -> None:
    """Replace symbolic dimensions named in `dims` by their values everywhere they appear."""
    if not dims:
        return
    known = _symbolic_dims(proto)
    unknown = sorted(set(dims) - known)
    if unknown:
        raise UnknownShapeError(
            f"dims names {', '.join(repr(u) for u in unknown)}, which the model does not have; "
            f"its symbolic dims are: {', '.join(sorted(known)) or 'none'}"
        )
    for name, value in dims.items():
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise UnknownShapeError(f"dim '{name}' must be a positive integer, got {value!r}")
    for value_info in [*proto.graph.input, *proto.graph.output, *proto.graph.value_info]:
        if not value_info.type.HasField("tensor_type"):
            continue
        for dim in value_info.type.tensor_type.shape.dim:
            if dim.HasField("dim_param") and dim.dim_param in dims:
                dim.dim_value = dims[dim.dim_param]


def _infer_shapes(proto: ModelProto, data_prop: bool) -> ModelProto:
    """Strict shape inference; `data_prop`: also propagate the values of shape computations
    (Shape -> Gather -> Reshape). ONNX Runtime's rewrite of a checked model needs none: it
    carries every shape propagated into the model as sent (the 7 bench models and 6 fixtures,
    basic and extended rewrites: identical protos), and propagating again took 0.17 s of
    GPT-2-small's 0.22 s of inference there."""
    try:
        return onnx.shape_inference.infer_shapes(
            proto, check_type=True, strict_mode=True, data_prop=data_prop
        )
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError) as exc:
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
        raise ModelCheckError(f"strict ONNX shape inference failed: {message}") from None
