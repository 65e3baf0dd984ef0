"""A framework-neutral input: a networkx node-link JSON DAG (the Checkmate benchmark format).

    {"nodes": [{"id": 0, "cost_cpu": 1.5e-3, "cost_ram": 4096, "backward": false,
                "name": "conv1"}, ...],
     "links": [{"source": 0, "target": 1}, ...]}            ("edges" is accepted too)

Every node is one op producing one value of `cost_ram` bytes in `cost_cpu` seconds (optional
"costs": {"cuda:0": seconds, ...} adds devices); `backward` puts it in the backward region
(default: forward). A node with `"input": true` is not computed but a graph input preloaded
before the step (an extension: the format has no inputs). Nodes nobody reads are the graph's
outputs. The result is the planner's own IR (`planner.ir.graph.Graph`, tensors of `uint8` with
shape `[cost_ram]`) plus a `schemas.profile.Profile` of the given costs, so the same schedule,
plan builder and validator apply; there is no ONNX model behind it and no runtime for it.
"""

from __future__ import annotations

import hashlib
import json
import platform
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from onnx import TensorProto

from planner.errors import InvalidInputError
from planner.ir.graph import Graph, Op, Region, Tensor, TensorRole
from schemas.plan import check_device_name
from schemas.profile import (
    CacheStats,
    MachineInfo,
    OpCost,
    OpProfile,
    Profile,
    TimingSettings,
)
from schemas.topology import CycleError, topological_order

OP_TYPE = "GraphNode"


def read_graph_json(path: str | Path) -> tuple[Graph, Profile]:
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        raise InvalidInputError(f"graph file not found: {path}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInputError(f"{path} is not JSON: {exc}") from None
    return graph_from_node_link(data, name=Path(path).stem)


def graph_from_node_link(data: Mapping[str, Any], name: str = "graph") -> tuple[Graph, Profile]:
    """The graph and profile of a node-link DAG. Nodes are handled by their position in the
    listing throughout, each object made once: a request's clock runs from reading the file,
    and on 20,000 ops the lookups by node id, a sort of an already sorted listing and copies
    of every node took up to a tenth of a 2 s limit."""
    nodes, links = _lists(data)
    preds = _predecessors(_index(nodes), links)
    order = _topological(preds)
    is_input = [bool(node.get("input")) for node in nodes]
    for i in order:
        if is_input[i] and preds[i]:
            raise InvalidInputError(f"input node {nodes[i]['id']!r} has predecessors")
    names = [str(node.get("name", f"n{node['id']}")) for node in nodes]
    if len(set(names)) != len(names):
        raise InvalidInputError("node names must be unique")

    op_order = [i for i in order if not is_input[i]]
    tensor_of = _positions(order, len(nodes))
    op_of = _positions(op_order, len(nodes))
    consumers = _consumers(op_order, preds)
    size = [int(node["cost_ram"]) for node in nodes]
    tensors = tuple(
        Tensor(id=t, name=names[i], dtype="uint8", elem_type=TensorProto.UINT8,
               shape=(size[i],), nbytes=size[i], producer=op_of[i], consumers=consumers[i],
               role=_role(nodes[i], is_input[i], not consumers[i]), is_graph_input=is_input[i],
               is_graph_output=not consumers[i], is_initializer=False)
        for t, i in enumerate(order))
    ops = tuple(
        Op(id=k, name=names[i], op_type=str(nodes[i].get("op", OP_TYPE)), domain="",
           attributes={}, inputs=tuple([tensor_of[p] for p in preds[i]]),
           outputs=(tensor_of[i],),
           region=Region.BACKWARD if nodes[i].get("backward") else Region.FORWARD)
        for k, i in enumerate(op_order))
    graph = Graph(
        name=name, ops=ops, tensors=tensors,
        inputs=tuple(t.id for t in tensors if t.is_graph_input),
        outputs=tuple(t.id for t in tensors if t.is_graph_output),
        # No ONNX model behind a node-link graph: it comes with its own profile, so nothing
        # that reads `proto` (profiling) runs on it.
        loss=None, opset=0, ir_version=0, model_sha256=_model_sha256(data["nodes"], links),
        proto=None,  # type: ignore[arg-type]
    )
    return graph, _profile(graph, [nodes[i] for i in op_order])


def _lists(data: Mapping[str, Any]) -> tuple[list[Mapping[str, Any]], list]:
    """The nodes and the links."""
    if not isinstance(data, Mapping) or not isinstance(data.get("nodes"), list):
        raise InvalidInputError("a node-link graph needs a 'nodes' list")
    links = data.get("links", data.get("edges", []))
    if not isinstance(links, list):
        raise InvalidInputError("'links' (or 'edges') must be a list of {source, target}")
    return data["nodes"], links


def _index(nodes: list[Mapping[str, Any]]) -> dict[Any, int]:
    """Node id -> listing position; checks every node."""
    index: dict[Any, int] = {}
    for i, node in enumerate(nodes):
        if not isinstance(node, Mapping) or "id" not in node:
            raise InvalidInputError("every node needs an 'id'")
        key = _key(node["id"])
        if key in index:
            raise InvalidInputError(f"node id {node['id']!r} appears twice")
        index[key] = i
        _check_node(node)
    return index


def _predecessors(index: dict[Any, int], links: list) -> list[list[int]]:
    """The predecessors of every node by listing position, each once, in link order."""
    preds: list[list[int]] = [[] for _ in index]
    for link in links:
        try:
            source, target = link["source"], link["target"]
        except (KeyError, TypeError):
            raise InvalidInputError("every link needs 'source' and 'target'") from None
        src, dst = index.get(_key(source)), index.get(_key(target))
        if src is None or dst is None:
            raise InvalidInputError(f"link {source!r} -> {target!r} names an unknown node")
        if src not in preds[dst]:
            preds[dst].append(src)
    return preds


def _positions(order: list[int], n: int) -> list[int | None]:
    """Listing position (of `n`) -> position in `order` (None for a node not in it)."""
    position: list[int | None] = [None] * n
    for k, i in enumerate(order):
        position[i] = k
    return position


def _consumers(op_order: list[int], preds: list[list[int]]) -> list[tuple[int, ...]]:
    """The ops reading each node's value by listing position, in op order (each once: the
    predecessors are)."""
    consumers: list[list[int]] = [[] for _ in preds]
    for k, i in enumerate(op_order):
        for p in preds[i]:
            consumers[p].append(k)
    return [tuple(c) for c in consumers]


def _role(node: Mapping[str, Any], is_input: bool, is_output: bool) -> TensorRole:
    if is_input:
        return TensorRole.DATA
    if is_output:
        return TensorRole.OUTPUT
    return TensorRole.GRADIENT if node.get("backward") else TensorRole.ACTIVATION


def _model_sha256(nodes: list, links: list) -> str:
    """The graph's identity (plan ids and profiles name it): the sha256 of its canonical JSON,
    so that the same graph listed with other whitespace or key order is the same model."""
    canonical = json.dumps({"nodes": nodes, "links": links}, sort_keys=True,
                           separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _key(value: Any) -> Any:
    return json.dumps(value, sort_keys=True) if isinstance(value, (list, dict)) else value


def _check_node(node: Mapping[str, Any]) -> None:
    for field in ("cost_ram",) + (() if node.get("input") else ("cost_cpu",)):
        value = node.get(field)
        # `not value >= 0` refuses NaN too, which json.loads reads from a bare `NaN`
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not value >= 0:
            raise InvalidInputError(f"node {node['id']!r}: '{field}' must be a number >= 0")
    if isinstance(node["cost_ram"], float):
        if not node["cost_ram"].is_integer():
            raise InvalidInputError(f"node {node['id']!r}: 'cost_ram' is a whole number of bytes")
    extra = node.get("costs", {})
    if not isinstance(extra, Mapping):
        raise InvalidInputError(f"node {node['id']!r}: 'costs' maps devices to seconds")
    for device, seconds in extra.items():
        try:
            check_device_name(device)
        except ValueError as exc:
            raise InvalidInputError(f"node {node['id']!r}: {exc}") from None
        if not isinstance(seconds, (int, float)) or not seconds >= 0:
            raise InvalidInputError(f"node {node['id']!r}: cost on {device} must be >= 0")


def _topological(preds: list[list[int]]) -> list[int]:
    """The one topological sort (schemas.topology), ties broken by the order nodes are listed.
    A listing already in dataflow order is that order (topological_order keeps a sorted graph
    as it is), found without sorting."""
    if all(p < i for i, ps in enumerate(preds) for p in ps):
        return list(range(len(preds)))
    try:
        return topological_order(preds)
    except CycleError:
        raise InvalidInputError("the graph has a cycle; a node-link schedule needs a DAG") from None


def _profile(graph: Graph, op_nodes: list[Mapping[str, Any]]) -> Profile:
    devices = sorted({"cpu", *(d for n in op_nodes for d in n.get("costs", {}))},
                     key=lambda d: (d != "cpu", d))
    return Profile(
        model_sha256=graph.model_sha256, graph_name=graph.name, devices=devices,
        ops=[_op_profile(op, node) for op, node in zip(graph.ops, op_nodes, strict=True)],
        copies=[], machine=MachineInfo(
            cpu_model="graph-json (user-supplied costs)", cpu_cores=1, threads=1,
            onnxruntime_version="n/a", providers={d: [] for d in devices},
            platform=platform.platform(), fingerprint="graph-json",
        ),
        timing=TimingSettings(method="user-supplied costs (graph-json)", warmup_runs=0,
                              min_repeats=1, max_repeats=1, rel_tolerance=1.0,
                              max_seconds_per_op=1.0),
        cache=CacheStats(path=None, hits=0, misses=0, deduplicated=0),
        total_seconds=0.0,
    )


def _op_profile(op: Op, node: Mapping[str, Any]) -> OpProfile:
    seconds = {"cpu": node["cost_cpu"], **node.get("costs", {})}
    return OpProfile(op_id=op.id, name=op.name, op_type=op.op_type, costs={
        d: OpCost(source="user", median_seconds=float(s), spread_seconds=0.0, repeats=0,
                  workspace_bytes=0) for d, s in seconds.items()})
