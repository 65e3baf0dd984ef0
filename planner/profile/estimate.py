"""Analytical fallback: an op's time from its FLOPs and bytes on a roofline of the device.

Used only for ops that no requested device can run, and always labelled `source="estimated"`.
time = max(flops / peak_flops, bytes / bandwidth), where bytes are the op's inputs plus outputs.
The roofline of a device is measured once per machine with ONNX Runtime itself (a large MatMul
for flop/s, a large Add for bytes/s, same thread count) and cached, or given by the caller.
"""

from __future__ import annotations

import json
import math

import numpy as np
import onnxruntime as ort
from onnx import ModelProto, TensorProto, helper

from planner.ir.graph import Graph, Op
from planner.profile.devices import Device, create_session
from planner.profile.timing import median_time
from schemas.profile import Roofline

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
    if op.op_type in ("MatMul", "Gemm") and len(op.inputs) >= 2:
        a = _shape(graph, op.inputs[0])
        k = a[0] if op.op_type == "Gemm" and op.attributes.get("transA", 0) else a[-1]
        return 2 * out_numel * max(1, k)
    if op.op_type == "Conv" and len(op.inputs) >= 2:
        w = _shape(graph, op.inputs[1])  # (M, C/group, k1, k2, ...)
        return 2 * out_numel * math.prod(w[1:])
    if op.op_type == "ConvTranspose" and len(op.inputs) >= 2:
        w = _shape(graph, op.inputs[1])  # (C, M/group, k1, k2, ...)
        return 2 * _numel(graph, op.inputs[0]) * math.prod(w[1:])
    if op.op_type.startswith("Reduce") or op.op_type in ("GlobalAveragePool", "AveragePool",
                                                         "MaxPool", "BatchNormalization"):
        return max(_numel(graph, op.inputs[0]) if op.inputs else 0, out_numel)
    return _ELEMENTWISE_FLOPS.get(op.op_type, 1) * out_numel


def op_bytes(graph: Graph, op: Op) -> int:
    return sum(graph.tensors[t].nbytes for t in (*op.input_ids, *op.output_ids))


def estimate_seconds(graph: Graph, op: Op, roofline: Roofline) -> float:
    return max(op_flops(graph, op) / roofline.peak_flops,
               op_bytes(graph, op) / roofline.bytes_per_second)


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
    return median_time(run, 7)


def measure_roofline(device: Device, threads: int) -> Roofline:
    """Peak flop/s (512^3 MatMul) and bandwidth (Add of 2 x 16 MiB -> 16 MiB) of `device`."""
    n = 512
    a = np.random.default_rng(0).random((n, n), dtype=np.float32)
    t_mm = _median_run(_one_node("MatMul", [[n, n], [n, n]], [n, n]), device, threads, [a, a])
    m = 4 * 1024 * 1024
    x = np.ones(m, np.float32)
    t_add = _median_run(_one_node("Add", [[m], [m]], [m]), device, threads, [x, x])
    return Roofline(peak_flops=2 * n**3 / t_mm, bytes_per_second=3 * x.nbytes / t_add,
                    source="measured")


def roofline_cache_key(device_fingerprint: str, provider: str, threads: int) -> str:
    return json.dumps(["roofline", device_fingerprint, provider, threads, ort.__version__])
