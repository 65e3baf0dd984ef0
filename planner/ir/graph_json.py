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
    if not isinstance(data, Mapping) or not isinstance(data.get("nodes"), list):
        raise InvalidInputError("a node-link graph needs a 'nodes' list")
    links = data.get("links", data.get("edges", []))
    if not isinstance(links, list):
        raise InvalidInputError("'links' (or 'edges') must be a list of {source, target}")
    nodes: dict[Any, dict] = {}
    for entry in data["nodes"]:
        if not isinstance(entry, Mapping) or "id" not in entry:
            raise InvalidInputError("every node needs an 'id'")
        key = _key(entry["id"])
        if key in nodes:
            raise InvalidInputError(f"node id {entry['id']!r} appears twice")
        nodes[key] = dict(entry)
        _check_node(nodes[key])
    preds: dict[Any, list] = {k: [] for k in nodes}
    succs: dict[Any, list] = {k: [] for k in nodes}
    for link in links:
        try:
            src, dst = _key(link["source"]), _key(link["target"])
        except (KeyError, TypeError):
            raise InvalidInputError("every link needs 'source' and 'target'") from None
        if src not in nodes or dst not in nodes:
            raise InvalidInputError(f"link {link['source']!r} -> {link['target']!r} names an "
                                    "unknown node")
        if src not in preds[dst]:
            preds[dst].append(src)
            succs[src].append(dst)
    order = _topological(nodes, preds)
    for key in order:
        if nodes[key].get("input") and preds[key]:
            raise InvalidInputError(f"input node {nodes[key]['id']!r} has predecessors")

    tensor_of = {key: i for i, key in enumerate(order)}
    op_of = {key: i for i, key in enumerate(k for k in order if not nodes[k].get("input"))}
    names = {key: str(nodes[key].get("name", f"n{nodes[key]['id']}")) for key in order}
    if len(set(names.values())) != len(names):
        raise InvalidInputError("node names must be unique")
    tensors, ops = [], []
    for key in order:
        node = nodes[key]
        is_input = bool(node.get("input"))
        is_output = not succs[key]
        role = (TensorRole.DATA if is_input else TensorRole.OUTPUT if is_output
                else TensorRole.GRADIENT if node.get("backward") else TensorRole.ACTIVATION)
        size = int(node["cost_ram"])
        tensors.append(Tensor(
            id=tensor_of[key], name=names[key], dtype="uint8", elem_type=TensorProto.UINT8,
            shape=(size,), nbytes=size, producer=None if is_input else op_of[key],
            consumers=tuple(sorted(op_of[s] for s in succs[key])), role=role,
            is_graph_input=is_input, is_graph_output=is_output, is_initializer=False,
        ))
        if not is_input:
            ops.append(Op(
                id=op_of[key], name=names[key], op_type=str(node.get("op", OP_TYPE)), domain="",
                attributes={}, inputs=tuple(tensor_of[p] for p in preds[key]),
                outputs=(tensor_of[key],),
                region=Region.BACKWARD if node.get("backward") else Region.FORWARD,
            ))
    canonical = json.dumps({"nodes": data["nodes"], "links": links}, sort_keys=True,
                           separators=(",", ":"), default=str)
    sha = hashlib.sha256(canonical.encode()).hexdigest()
    graph = Graph(
        name=name, ops=tuple(ops), tensors=tuple(tensors),
        inputs=tuple(tensor_of[k] for k in order if nodes[k].get("input")),
        outputs=tuple(tensor_of[k] for k in order if not succs[k]),
        # No ONNX model behind a node-link graph: it comes with its own profile, so nothing
        # that reads `proto` (profiling) runs on it.
        loss=None, opset=0, ir_version=0, model_sha256=sha, proto=None,  # type: ignore[arg-type]
    )
    return graph, _profile(graph, [nodes[k] for k in order if not nodes[k].get("input")])


def _key(value: Any) -> Any:
    return json.dumps(value, sort_keys=True) if isinstance(value, (list, dict)) else value


def _check_node(node: dict) -> None:
    for field in ("cost_ram",) + (() if node.get("input") else ("cost_cpu",)):
        value = node.get(field)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
            raise InvalidInputError(f"node {node['id']!r}: '{field}' must be a number >= 0")
    if int(node["cost_ram"]) != node["cost_ram"]:
        raise InvalidInputError(f"node {node['id']!r}: 'cost_ram' is a whole number of bytes")
    extra = node.get("costs", {})
    if not isinstance(extra, Mapping):
        raise InvalidInputError(f"node {node['id']!r}: 'costs' maps devices to seconds")
    for device, seconds in extra.items():
        try:
            check_device_name(device)
        except ValueError as exc:
            raise InvalidInputError(f"node {node['id']!r}: {exc}") from None
        if not isinstance(seconds, (int, float)) or seconds < 0:
            raise InvalidInputError(f"node {node['id']!r}: cost on {device} must be >= 0")


def _topological(nodes: dict, preds: dict) -> list:
    """The one topological sort (schemas.topology), ties broken by the order nodes are listed."""
    rank = {k: i for i, k in enumerate(nodes)}
    keys = list(nodes)
    try:
        order = topological_order([[rank[p] for p in preds[k]] for k in keys])
    except CycleError:
        raise InvalidInputError("the graph has a cycle; a node-link schedule needs a DAG") from None
    return [keys[i] for i in order]


def _profile(graph: Graph, op_nodes: list[dict]) -> Profile:
    devices = sorted({"cpu", *(d for n in op_nodes for d in n.get("costs", {}))},
                     key=lambda d: (d != "cpu", d))
    ops = []
    for op, node in zip(graph.ops, op_nodes, strict=True):
        seconds = {"cpu": float(node["cost_cpu"]), **{d: float(s) for d, s in
                                                      node.get("costs", {}).items()}}
        ops.append(OpProfile(op_id=op.id, name=op.name, op_type=op.op_type, costs={
            d: OpCost(source="user", median_seconds=s, spread_seconds=0.0, repeats=0,
                      workspace_bytes=0) for d, s in seconds.items()}))
    return Profile(
        model_sha256=graph.model_sha256, graph_name=graph.name, devices=devices, ops=ops,
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
