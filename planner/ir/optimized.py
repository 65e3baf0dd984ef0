"""The planner's side of planning the graph ONNX Runtime would run (schemas.optimized_graph).

`optimize_for_request` rewrites the model for the request's devices (or reads the rewrite from
the machine's cache, planner.ir.rewrite_cache); `rebuild_recorded` makes the
graph a plan names again and refuses one whose digest differs. The training step's state is found
in the model as sent (planner.ir.roles) and carried over by name: a fusion may put a
non-elementwise op in a state's update chain (ONNX Runtime's basic level folds a momentum
update `mu * m + g` into the Gemm computing `g`), where the structural analysis would no longer
see it. `check_state_kept` makes sure every state input and its updated output are still there.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Literal

from onnx import ModelProto

from planner.errors import OptimizedGraphError
from planner.ir.rewrite_cache import cached_optimized_model
from schemas.optimized_graph import (
    CPU_PROVIDER,
    GraphOptimizationError,
    OptimizedGraph,
    onnxruntime_version,
    providers_for,
    rebuild,
)


def optimize_for_request(data: bytes, level: Literal["basic", "extended"],
                         devices: Sequence[str], dims: Mapping[str, int],
                         late_recompute: bool = True) -> tuple[bytes, OptimizedGraph]:
    """The optimized graph for the devices' providers, and what the plan records of it
    (`late_recompute`: with schemas.late_recompute's copies).

    Basic rewrites run before ONNX Runtime splits the graph between providers, so they are the
    same for every device: a request for a GPU this machine's ONNX Runtime cannot start gets
    the basic graph (recorded as such) instead of fusions made for the wrong provider.
    """
    providers = providers_for(devices)
    try:
        data_out = cached_optimized_model(data, level, providers, dims,
                                          late_recompute=late_recompute)
    except GraphOptimizationError as exc:
        if providers == [CPU_PROVIDER]:
            raise OptimizedGraphError(f"{exc}; plan with graph optimization 'disable'") from None
        level, providers = "basic", [CPU_PROVIDER]
        data_out = cached_optimized_model(data, level, providers, dims,
                                          late_recompute=late_recompute)
    return data_out, OptimizedGraph(
        level=level, providers=providers, onnxruntime_version=onnxruntime_version(),
        sha256=hashlib.sha256(data_out).hexdigest(), late_recompute=late_recompute,
    )


def rebuild_recorded(data: bytes, recorded: OptimizedGraph, dims: Mapping[str, int]) -> bytes:
    """The optimized graph a plan was made for, rebuilt from the model (schemas.optimized_graph
    .rebuild); a different rewrite is refused, naming both ONNX Runtime versions."""
    try:
        return rebuild(data, recorded, dims)
    except GraphOptimizationError as exc:
        raise OptimizedGraphError(str(exc)) from None


def check_state_kept(state: Mapping[str, str], rewritten: ModelProto, level: str) -> None:
    """Refuse a rewrite that lost a state input or its updated output, or changed its type
    (ONNX Runtime keeps graph inputs and outputs, names and types: this says so if it ever
    does not)."""
    g = rewritten.graph
    inputs = {v.name: v.type for v in g.input}
    outputs = {v.name: v.type for v in g.output}
    lost = [f"{i} -> {o}" for i, o in state.items()
            if i not in inputs or o not in outputs or inputs[i] != outputs[o]]
    if lost:
        raise OptimizedGraphError(
            f"ONNX Runtime's {level} rewrite does not keep the training state "
            f"({'; '.join(lost[:3])}); plan with graph optimization 'disable'"
        )
