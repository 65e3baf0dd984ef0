"""Export a torch training step (forward + backward + optimizer update) as one ONNX graph.

Needs the optional `export` extra (torch + onnxscript): `pip install 'arenaplan[export]'`.
Importing this package works without it; calling the exporter without it raises
`planner.errors.InvalidInputError` saying so.

    from planner.export import OptimizerSpec, export_training_graph
    result = export_training_graph(model, (x,), y, "cross_entropy", OptimizerSpec("adam", lr=1e-3))
    result.save("model.onnx")

The graph uses standard ONNX ops only (opset 18, IR version 10), runs on plain onnxruntime,
passes onnx.checker and strict shape inference, and every tensor in it has a static shape.
Parameters, buffers (batch-norm running statistics, num_batches_tracked) and optimizer state
(momentum buffers, Adam moments and its step counter) are graph inputs; their updated values
are graph outputs named `<input>.updated`; `loss` is an output too. Supported optimizers: SGD,
SGD with momentum, Adam, AdamW, with hyper-parameters as graph constants.

Every export is verified: onnxruntime runs the graph and an eager torch step runs on the same
values; `ExportResult` carries the differences (see planner.export.verify for Adam).

How (REFERENCES.md, "Facts about the dependencies"): `torch.func.grad_and_value` over
`functional_call`, traced by `make_fx` (math attention backend, no mkldnn RNN kernels) with core
+ backward + batch-norm decompositions and our own for convolution, adaptive-pool, 3-D pooling,
upsampling and fused-attention backward (planner.export.decompositions), exported with
`torch.onnx.export(dynamo=True)` without the optimizer rules that delete tiny constants
(planner.export.onnx_graph), with 2-D transposes folded into Gemm's trans flags
(planner.export.transposes: an ONNX Transpose is a copy where torch's is a view). Dropout stays
on: its masks are drawn in the graph by seeded random nodes, and verification replays them in
torch (planner.export.randomness). An op without ONNX translation is reported with the module
that called it (planner.export.unsupported).

Modules: spec (OptimizerSpec, ExportResult; no torch), exporter (export_training_graph),
trace, decompositions (+ attention, resampling, pooling), randomness, unsupported, optimizers,
losses, onnx_graph, transposes, verify, factory (MODULE:FACTORY loading).
"""

from __future__ import annotations

from typing import Any

from planner.export.spec import (
    INPUT_KINDS,
    OPTIMIZER_NAMES,
    ExportResult,
    OptimizerSpec,
)

__all__ = [
    "INPUT_KINDS",
    "OPTIMIZER_NAMES",
    "ExportResult",
    "OptimizerSpec",
    "export_training_graph",
]


def export_training_graph(*args: Any, **kwargs: Any) -> ExportResult:
    """See planner.export.exporter.export_training_graph (imported lazily: it needs torch)."""
    from planner.export._deps import require_torch

    require_torch()
    from planner.export.exporter import export_training_graph as _export

    return _export(*args, **kwargs)
