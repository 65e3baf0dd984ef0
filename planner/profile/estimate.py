"""Analytical fallback: an op's time from its FLOPs and bytes on a roofline of the device.

Used for ops that no requested device can run and ops the profiler did not measure (out of time,
or inputs over its memory allowance), always labelled `source="estimated"`. The roofline of a
device is measured once per machine with ONNX Runtime itself (a 512^3 MatMul for flop/s, an Add
of 16 MiB arrays for bytes/s, same thread count) and cached, or given by the caller.

time = LAUNCH_FLOOR_S + SLOWDOWN[class] * max(flops / peak_flops, bytes / bandwidth), where bytes
are the op's inputs plus outputs and the class is the op type (grouped convolutions apart);
a broadcasting elementwise op whose output's innermost dimension is 1 costs NARROW_BROADCAST_S
per output element instead (ONNX Runtime walks it element by element: MobileNetV2's weight decay
on (1280, 320, 1, 1) took 4.1 ms, 80x its bytes at bandwidth).

The bare roofline was optimistic. Against 3,263 distinct measurements of the six fixtures and
GPT-2-small, BERT-small, VGG-11, MobileNetV2, ResNet-18 and UNet-Adam (ONNX Runtime's extended
rewrite, CPU, one thread, thread-CPU clock; roofline 110 GFLOP/s, 61 GB/s) estimated/measured
had a median of 0.42, a tenth of the ops under 0.01 (small ops cost a launch, not their bytes),
and the estimates summed to 0.54 of the measured times while FusedMatMul was counted as
elementwise (0.65 counted as a product). The constants below come from those measurements
(bench/profile/calibrate_estimates.py re-derives them; its results are bench/profile/
estimates.md): SLOWDOWN is the median of measured / roofline time per class over the ops whose
roofline time is at least 10 us (the floor is negligible there), for classes with at least 5 of
them; DEFAULT_SLOWDOWN the median over all of them; LAUNCH_FLOOR_S the median measured time of
the ops whose roofline time is under 50 ns (mostly shape ops and scalar arithmetic; the run's
fixed overhead is already subtracted from measurements); NARROW_BROADCAST_S the median per
element of narrow broadcasts of 4,096 elements or more. After it the median is 1.02, the tenth
percentile 0.45, the ninetieth 1.41, and the estimates sum to 0.99 of the measured times (0.60
to 1.08 per model). Fitted on the fixtures alone, the constants give the bench models a median
of 1.16 (tenth to ninetieth percentile 0.32-2.9): they carry to unseen graphs, less well for the
rarer classes. The slowdowns are ratios to the machine's own roofline, so they carry to other
CPUs roughly; the floor and the per-element cost are seconds of the development machine (2.5 GHz
Xeon), and a GPU's launch costs more.
"""

from __future__ import annotations

import json
import math

import numpy as np
import onnxruntime as ort
from onnx import ModelProto, TensorProto, helper

from planner.ir.graph import Graph, Op
from planner.profile.devices import Device, create_session
from planner.profile.op_runner import kernel_clock
from planner.profile.timing import CLOCKS, median_time
from schemas.profile import Roofline

# ONNX Runtime's fused forms (com.microsoft FusedMatMul, FusedGemm, FusedConv) do the same
# products as the standard ops.
_MATMULS = frozenset({"MatMul", "Gemm", "FusedMatMul", "FusedGemm"})
_CONVS = frozenset({"Conv", "FusedConv"})
_POOLS = frozenset({"MaxPool", "AveragePool"})
_GROUPED = frozenset({"Conv", "FusedConv", "ConvTranspose"})
_BROADCASTING = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Where", "Equal", "Less",
                           "LessOrEqual", "Greater", "GreaterOrEqual", "And", "Or", "Max",
                           "Min"})
# Measured time / roofline time, per op type (how they were derived: the module's docstring).
SLOWDOWN = {
    "Add": 0.86, "Cast": 1.8, "Clip": 0.79, "Conv": 2.5, "Conv/grouped": 43, "ConvTranspose": 1.8,
    "ConvTranspose/grouped": 16, "Div": 1.6, "Expand": 1.8, "FusedConv": 1.1, "FusedMatMul": 1.3,
    "Gather": 0.19, "Gemm": 1.4, "LessOrEqual": 1.5, "MatMul": 1.3, "MaxPool": 14, "Mul": 1.0,
    "RandomUniformLike": 29, "ReduceMean": 1.4, "ReduceSum": 1.5, "Relu": 0.77, "Reshape": 0.01,
    "ScatterElements": 4.7, "ScatterND": 1.9, "Slice": 2.3, "Sqrt": 2.7, "Sub": 0.85,
    "Transpose": 0.96, "Where": 2.2,
}
NARROW_BROADCAST_S = 1e-8  # per output element
DEFAULT_SLOWDOWN = 1.3
LAUNCH_FLOOR_S = 3.3e-7
_ELEMENTWISE_FLOPS = {"Softmax": 5, "LogSoftmax": 5, "Erf": 8, "Tanh": 8, "Sigmoid": 4,
                      "Exp": 4, "Log": 4, "Pow": 4, "Sqrt": 2, "Div": 1, "Gelu": 10}


def _numel(graph: Graph, t: int | None) -> int:
    return 0 if t is None else math.prod(graph.tensors[t].shape)


def _shape(graph: Graph, t: int | None) -> tuple[int, ...]:
    """Shape of an operand ONNX does not let the op omit (MatMul's, Gemm's and Conv's first two)."""
    assert t is not None, "a required operand is omitted"
    return graph.tensors[t].shape


def op_flops(graph: Graph, op: Op) -> int:
    """Floating-point operations of one execution (multiply-add = 2)."""
    out = op.outputs[0] if op.outputs else None
    out_numel = _numel(graph, out)
    if op.op_type in _MATMULS and len(op.inputs) >= 2:
        a = _shape(graph, op.inputs[0])
        k = a[-2] if op.attributes.get("transA", 0) else a[-1]
        return 2 * out_numel * max(1, k)
    if op.op_type in _CONVS and len(op.inputs) >= 2:
        w = _shape(graph, op.inputs[1])  # (M, C/group, k1, k2, ...)
        return 2 * out_numel * math.prod(w[1:])
    if op.op_type == "ConvTranspose" and len(op.inputs) >= 2:
        w = _shape(graph, op.inputs[1])  # (C, M/group, k1, k2, ...)
        return 2 * _numel(graph, op.inputs[0]) * math.prod(w[1:])
    if op.op_type in _POOLS:  # one operation per window element of every output
        return out_numel * math.prod(op.attributes.get("kernel_shape", (1,)))
    if op.op_type.startswith("Reduce") or op.op_type in ("GlobalAveragePool",
                                                         "BatchNormalization"):
        return max(_numel(graph, op.inputs[0]) if op.inputs else 0, out_numel)
    return _ELEMENTWISE_FLOPS.get(op.op_type, 1) * out_numel


def op_bytes(graph: Graph, op: Op) -> int:
    return sum(graph.tensors[t].nbytes for t in (*op.input_ids, *op.output_ids))


def roofline_seconds(graph: Graph, op: Op, roofline: Roofline) -> float:
    """The bare roofline time: the slower of the op's FLOPs at peak and its bytes at bandwidth."""
    return max(op_flops(graph, op) / roofline.peak_flops,
               op_bytes(graph, op) / roofline.bytes_per_second)


def calibration_key(op: Op) -> str:
    """The class an op's slowdown is measured for: its type, grouped convolutions apart
    (depthwise ones run far below the rate of dense ones)."""
    if op.op_type in _GROUPED and int(op.attributes.get("group", 1)) > 1:
        return f"{op.op_type}/grouped"
    return op.op_type


def narrow_broadcast(graph: Graph, op: Op) -> bool:
    """A broadcasting elementwise op whose output's innermost dimension is 1 (a 1x1 conv
    weight's (M, C, 1, 1) times a scalar): ONNX Runtime walks it one element at a time."""
    if op.op_type not in _BROADCASTING or not op.output_ids:
        return False
    out = graph.tensors[op.output_ids[0]].shape
    return bool(out) and out[-1] == 1 and len({graph.tensors[t].shape
                                               for t in op.input_ids}) > 1


def estimate_seconds(graph: Graph, op: Op, roofline: Roofline) -> float:
    """The calibrated estimate: the launch floor plus the roofline time times the op's measured
    slowdown, or per element for a narrow broadcast."""
    if narrow_broadcast(graph, op):
        return LAUNCH_FLOOR_S + NARROW_BROADCAST_S * _numel(graph, op.output_ids[0])
    slowdown = SLOWDOWN.get(calibration_key(op), DEFAULT_SLOWDOWN)
    return LAUNCH_FLOOR_S + slowdown * roofline_seconds(graph, op, roofline)


def _one_node(op_type: str, shapes: list[list[int]], out_shape: list[int]) -> ModelProto:
    f = TensorProto.FLOAT
    names = [f"x{i}" for i in range(len(shapes))]
    graph = helper.make_graph(
        [helper.make_node(op_type, names, ["y"])], "roofline",
        [helper.make_tensor_value_info(n, f, s) for n, s in zip(names, shapes, strict=True)],
        [helper.make_tensor_value_info("y", f, out_shape)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def _median_run(model: ModelProto, device: Device, threads: int, arrays: list[np.ndarray]) -> float:
    session = create_session(model, device, threads)
    binding = session.io_binding()
    device_type, device_id = device.ortvalue_device
    for i, array in enumerate(arrays):
        binding.bind_ortvalue_input(
            f"x{i}", ort.OrtValue.ortvalue_from_numpy(array, device_type, device_id))
    binding.bind_output("y", device_type, device_id)

    def run() -> None:
        session.run_with_iobinding(binding)
        binding.synchronize_outputs()

    for _ in range(2):
        run()
    return median_time(run, 7, CLOCKS[kernel_clock(device, threads)])


def matmul_seconds(device: Device, threads: int, n: int) -> float:
    """The median time of an n x n x n float MatMul on `device` (the roofline's flop/s, and the
    reference kernel of planner.profile.host_speed)."""
    a = np.random.default_rng(0).random((n, n), dtype=np.float32)
    return _median_run(_one_node("MatMul", [[n, n], [n, n]], [n, n]), device, threads, [a, a])


def measure_roofline(device: Device, threads: int) -> Roofline:
    """Peak flop/s (512^3 MatMul) and bandwidth (Add of 2 x 16 MiB -> 16 MiB) of `device`, timed
    on the clock its ops are (planner.profile.op_runner.kernel_clock), so that a busy machine
    does not lower it below what the slowdowns were measured against."""
    n = 512
    t_mm = matmul_seconds(device, threads, n)
    m = 4 * 1024 * 1024
    x = np.ones(m, np.float32)
    t_add = _median_run(_one_node("Add", [[m], [m]], [m]), device, threads, [x, x])
    return Roofline(peak_flops=2 * n**3 / t_mm, bytes_per_second=3 * x.nbytes / t_add,
                    source="measured")


def roofline_cache_key(device_fingerprint: str, device: Device, threads: int) -> str:
    return json.dumps(["roofline", device_fingerprint, device.provider, threads, ort.__version__,
                       kernel_clock(device, threads)])
