"""A conservative bound on each op's kernel scratch from its shapes alone, for a plan whose
workspace could not be measured (planner.profile.graph_workspace: no time or host memory left
for the whole-graph session, or a device this machine lacks).

Reserving 0 there would let kernels allocate beside the arena with nothing in the plan saying
so. The bound instead covers what the per-op profile (planner.profile.op_runner) measures, the
figure a plan made with a profile reserves:

- On the CPU, ONNX Runtime 1.31's kernels of the op types in SCRATCH_FREE_CPU took no arena
  memory on any of the 5,774 distinct op signatures profiled on the development machine (every
  fixture and bench model, with and without graph optimizations); they count 0.
- Any other op (Conv, FusedConv, ConvTranspose and Where took scratch there, and an op type never
  profiled may) counts twice the larger of its largest operand and its convolution column buffer
  (one image's im2col matrix), rounded up to a power of two, and at least MIN_OP_SCRATCH. Where's
  scratch was up to two select temporaries of its output's size and a convolution's its column
  buffer; ONNX Runtime's arena hands them out in regions of doubling size, which the rounding
  covers. On every profiled signature the bound is at least the measured figure, and on the
  bench models a device's bound is 1-4x the per-op profile's largest (GPT-2-small: 8 MiB, equal;
  ResNet-18: 32 MiB against 8 MiB; U-Net: 128 MiB against 64 MiB).

On a GPU nothing is known to be scratch-free (cuBLAS and cuDNN take workspace of their own), so
every op counts its shape bound; that rule has not been checked against a GPU profile.
"""

from __future__ import annotations

import math

import numpy as np

from planner.ir.graph import Graph, Op
from planner.profile.costs import measured_as
from planner.profile.devices import parse_device

SCRATCH_FREE_CPU = frozenset({
    "Add", "And", "Cast", "Clip", "Concat", "ConstantOfShape", "Div", "Equal", "Erf", "Exp",
    "Expand", "FusedGemm", "FusedMatMul", "Gather", "GatherElements", "GatherND", "Gemm",
    "GreaterOrEqual", "Identity", "Less", "LessOrEqual", "LogSoftmax", "MatMul", "MaxPool", "Mul",
    "Neg", "Not", "Or", "Pow", "RandomUniformLike", "Reciprocal", "ReduceMax", "ReduceMean",
    "ReduceSum", "Relu", "Reshape", "ScatterElements", "ScatterND", "Slice", "Softmax", "Split",
    "Sqrt", "Squeeze", "Sub", "Tanh", "Transpose", "Unsqueeze",
})
# The least an op that may take scratch counts: the profile measured 512 B for a Where of 32 B.
MIN_OP_SCRATCH = 4096
_CONVOLUTIONS = frozenset({"Conv", "FusedConv", "ConvTranspose"})


def column_bytes(graph: Graph, op: Op) -> int:
    """One image's im2col matrix of a convolution (0 for any other op): the kernel's taps per
    group times the output's spatial size (a ConvTranspose: its input's)."""
    if op.op_type not in _CONVOLUTIONS or len(op.inputs) < 2 or op.inputs[1] is None:
        return 0
    weight = graph.tensors[op.inputs[1]].shape  # (M, C/group, k...) or (C, M/group, k...)
    image = op.inputs[0] if op.op_type == "ConvTranspose" else op.outputs[0]
    if image is None:
        return 0
    spatial = graph.tensors[image].shape[2:]
    itemsize = np.dtype(graph.tensors[image].dtype).itemsize
    return math.prod(weight[1:]) * math.prod(spatial) * itemsize


def op_scratch_bound(graph: Graph, op: Op, device: str) -> int:
    """The most scratch `op` is taken to allocate on `device` (a plan device name) when it was
    not measured."""
    if not parse_device(measured_as(device)).is_gpu and op.op_type in SCRATCH_FREE_CPU:
        return 0
    largest = max([column_bytes(graph, op),
                   *(graph.tensors[t].nbytes for t in (*op.input_ids, *op.output_ids))])
    return max(MIN_OP_SCRATCH, 1 << max(0, 2 * largest - 1).bit_length())
