"""The graph a plan is made for when ONNX Runtime's graph optimizations are on.

A whole-graph ONNX Runtime session never runs the model it is given: it first rewrites it (basic
level: constant folding, transposes folded into Gemm/MatMul, redundant nodes removed, all in
standard ops and before the graph is split between providers; extended level: fusions into
ONNX Runtime's own ops such as FusedConv, FusedGemm and FusedMatMul, for the nodes assigned to the
CPU and CUDA providers). A plan made for the model as sent would keep every one of those
intermediate values in a planned buffer and run the slow form of the step, so the planner can plan
the rewritten graph instead.

Planner and runtime must agree on that graph to the byte: plan op ids index its nodes. Both call
`optimized_model` here (the runtime imports nothing of the planner), and the plan names the
sha256 of its result (`OptimizedGraph.sha256`) next to that of the model the user sent (from
which plan ids are computed). The function is ONNX Runtime's own rewrite, saved with
`SessionOptions.optimized_model_filepath`, then changed by rewrites of ours (each leaves a graph
it does not match byte for byte):

- the copy nodes the CUDA provider inserts between providers (MemcpyFromHost / MemcpyToHost) are
  removed, since the plan places values and copies them itself;
- a weight gradient's matrix product is folded into its SGD update (schemas.update_fusion),
  which ONNX Runtime does not do and which takes the gradient's bytes out of the step;
- a matrix product whose addend is made much later is kept apart from it
  (schemas.late_addend: a tied embedding's gradient), so that the product's factors do not live
  until the addend exists;
- the cross-entropy gradient is written over the softmax instead of beside a logits-sized
  one-hot matrix (schemas.loss_fusion), which takes one logits-sized buffer out of the peak;
- the 1x1 MaxPool torch's export runs only to learn each plane's flat index offset becomes those
  offsets as a constant (schemas.pool_offsets);
- a cheap elementwise value read in the forward and again in the backward, whose inputs live
  until then anyway, is computed again before its backward readers instead of held
  (schemas.late_recompute: a GELU's merged power of its input).

Another ONNX Runtime version may rewrite differently; the
digest then differs and the runtime refuses the plan with both versions named.
"""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from schemas.late_addend import split_late_addends
from schemas.late_recompute import recompute_for_late_readers
from schemas.loss_fusion import fuse_cross_entropy_gradients
from schemas.pool_offsets import fold_pool_offsets
from schemas.update_fusion import fuse_sgd_updates

GraphOptimization = Literal["disable", "basic", "extended"]
# What the CLI and the service plan when a request does not say (PlanRequest's own default,
# for library callers, is "disable"): measured in bench/runtime/optimized_graphs.md.
SERVICE_DEFAULT: GraphOptimization = "extended"
CPU_PROVIDER = "CPUExecutionProvider"
CUDA_PROVIDER = "CUDAExecutionProvider"
# ONNX Runtime's own (com.microsoft) ops that the extended level writes for float training
# graphs on the CPU and CUDA providers: activation fusions into convolutions and matrix products,
# scale and transpose fusions into MatMul, and the GELU / layer-norm fusions of transformers.
# Every one has a CPU kernel (tested), so a plan may place it on the CPU.
FUSED_OPS = frozenset({
    "FusedConv", "FusedGemm", "FusedMatMul", "Gelu", "BiasGelu", "FastGelu", "QuickGelu",
    "SkipLayerNormalization", "SkipSimplifiedLayerNormalization",
})
CONTRIB_DOMAIN = "com.microsoft"
# Rewrites left out. Constant folding turns values a training step makes when it needs them
# (Expand / ConstantOfShape of a scalar: the loss seed, masks) into initializers, which live for
# the whole step: on the test fixtures that raised the smallest feasible arena by up to 36%.
DISABLED_REWRITES = ("ConstantFolding",)
# Nodes the CUDA provider's partitioning inserts where a value crosses providers.
_COPY_OPS = frozenset({"MemcpyFromHost", "MemcpyToHost"})


class GraphOptimizationError(ValueError):
    """ONNX Runtime could not produce the optimized graph as asked (e.g. no CUDA provider here)."""


class OptimizedGraph(BaseModel):
    """Which graph a plan was made for, when it is not the model as sent."""

    model_config = ConfigDict(extra="forbid")

    level: Literal["basic", "extended"] = Field(
        description="ONNX Runtime graph optimization level applied before planning")
    providers: list[str] = Field(
        description="ONNX Runtime execution providers the graph was optimized for, in order")
    onnxruntime_version: str = Field(description="the ONNX Runtime that wrote the graph")
    sha256: str = Field(
        description="sha256 of the optimized model bytes; the plan's op ids index its nodes")
    late_recompute: bool = Field(
        default=True,
        description="whether cheap values read again in the backward are made again there "
                    "(schemas.late_recompute) instead of held; false in a plan whose budget "
                    "holds them")


def providers_for(devices: Sequence[str]) -> list[str]:
    """The providers a request's devices run on: CUDA first when any device is a GPU."""
    if any(d.startswith("cuda") for d in devices):
        return [CUDA_PROVIDER, CPU_PROVIDER]
    return [CPU_PROVIDER]


def is_fused_op(domain: str, op_type: str) -> bool:
    return domain == CONTRIB_DOMAIN and op_type in FUSED_OPS


def onnxruntime_version() -> str:
    import onnxruntime

    return str(onnxruntime.__version__)


def optimized_model(data: bytes, level: Literal["basic", "extended"], providers: Sequence[str],
                    dims: Mapping[str, int] | None = None, late_recompute: bool = True) -> bytes:
    """The model bytes ONNX Runtime runs after its `level` rewrites for `providers` (and ours:
    the module doc; schemas.late_recompute's last, and only with `late_recompute`).

    Symbolic dims are bound first (as free-dimension overrides), so that shape-dependent
    rewrites see the shapes the plan is made for. Deterministic for one ONNX Runtime version.
    """
    import onnxruntime as ort

    levels = {"basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
              "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED}
    with tempfile.TemporaryDirectory(prefix="arenaplan-opt-") as tmp:
        path = Path(tmp) / "optimized.onnx"
        options = ort.SessionOptions()
        options.graph_optimization_level = levels[level]
        options.optimized_model_filepath = str(path)
        options.intra_op_num_threads = 1
        options.log_severity_level = 3
        for name, value in sorted((dims or {}).items()):
            options.add_free_dimension_override_by_name(name, value)
        try:
            session = ort.InferenceSession(data, options, providers=list(providers),
                                           disabled_optimizers=list(DISABLED_REWRITES))
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises several unrelated types
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
            raise GraphOptimizationError(f"ONNX Runtime could not optimize the model: {first}"
                                         ) from None
        missing = [p for p in providers if p not in session.get_providers()]
        if missing:
            raise GraphOptimizationError(
                f"ONNX Runtime has no {', '.join(missing)} on this machine, so it cannot optimize "
                "the graph for it")
        written = path.read_bytes()
    rewrites = (_without_copy_nodes, fuse_sgd_updates, split_late_addends,
                fuse_cross_entropy_gradients, fold_pool_offsets)
    for rewrite in rewrites:
        written = rewrite(written)
    return with_late_copies(written) if late_recompute else written


def with_late_copies(held: bytes) -> bytes:
    """The optimized graph from the same graph without schemas.late_recompute's copies (the
    last of our rewrites): one ONNX Runtime rewrite gives both."""
    return recompute_for_late_readers(held)


def rebuild(data: bytes, recorded: OptimizedGraph, dims: Mapping[str, int] | None) -> bytes:
    """The optimized graph a plan was made for, rebuilt from the model as sent: the planner's
    and the runtime's one check. A rewrite this ONNX Runtime cannot make, or one into another
    graph, raises GraphOptimizationError naming both ONNX Runtime versions (the graph also
    changes with our own rewrites, so with the arenaplan that made the plan)."""
    data_out = optimized_model(data, recorded.level, recorded.providers, dims,
                               recorded.late_recompute)
    digest = hashlib.sha256(data_out).hexdigest()
    if digest != recorded.sha256:
        raise GraphOptimizationError(
            f"the plan was made for ONNX Runtime {recorded.onnxruntime_version}'s "
            f"{recorded.level} rewrite of this model (sha256 {recorded.sha256[:12]}...), but "
            f"ONNX Runtime {onnxruntime_version()} here rewrites it into another graph (sha256 "
            f"{digest[:12]}...), or another arenaplan made the plan; plan again with this "
            "ONNX Runtime and arenaplan, or use the ones that made it")
    return data_out


def _without_copy_nodes(data: bytes) -> bytes:
    """Drop the provider-crossing copies: readers of a copy read its source instead (a copy that
    writes a graph output becomes an Identity, which keeps the output's name)."""
    import onnx

    proto = onnx.ModelProto()
    proto.ParseFromString(data)
    graph = proto.graph
    if not any(n.op_type in _COPY_OPS for n in graph.node):
        return data
    outputs = {v.name for v in graph.output}
    source = {n.output[0]: n.input[0] for n in graph.node
              if n.op_type in _COPY_OPS and n.output[0] not in outputs}

    def origin(name: str) -> str:
        while name in source:
            name = source[name]
        return name

    kept = []
    for node in graph.node:
        if node.op_type in _COPY_OPS and node.output[0] in source:
            continue
        for k, name in enumerate(node.input):
            node.input[k] = origin(name)
        if node.op_type in _COPY_OPS:
            node.op_type, node.domain = "Identity", ""
        kept.append(node)
    del graph.node[:]
    graph.node.extend(kept)
    return proto.SerializeToString()
