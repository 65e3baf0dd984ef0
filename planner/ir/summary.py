"""Condense a graph IR into the public `GraphSummary` (what `arenaplan inspect` shows)."""

from __future__ import annotations

from collections import Counter

from planner.ir.graph import Graph, TensorRole
from schemas.graph import GraphSummary
from schemas.units import format_bytes


def summarize(graph: Graph) -> GraphSummary:
    by_role = graph.bytes_by_role()
    return GraphSummary(
        name=graph.name,
        model_sha256=graph.model_sha256,
        ir_version=graph.ir_version,
        opset=graph.opset,
        ops=len(graph.ops),
        tensors=len(graph.tensors),
        parameters=graph.parameter_count(),
        parameter_tensors=len(graph.tensors_with_role(TensorRole.PARAMETER)),
        loss=graph.tensors[graph.loss].name if graph.loss is not None else None,
        ops_by_region=dict(Counter(op.region.value for op in graph.ops)),
        bytes_by_role=by_role,
        activation_bytes=by_role[TensorRole.ACTIVATION.value],
        total_bytes=sum(by_role.values()),
    )


def one_line(summary: GraphSummary) -> str:
    regions = "/".join(
        str(summary.ops_by_region.get(r, 0)) for r in ("forward", "backward", "optimizer")
    )
    return (
        f"{summary.name}: {summary.ops} ops (fwd/bwd/opt {regions}), {summary.tensors} tensors, "
        f"{summary.parameters:,} parameters in {summary.parameter_tensors} tensors, "
        f"activations {format_bytes(summary.activation_bytes)}, "
        f"all tensors {format_bytes(summary.total_bytes)}, "
        f"loss {summary.loss or '-'}"
    )
