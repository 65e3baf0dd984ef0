"""Measure one op on one device: its own single-node ONNX Runtime session on real inputs.

Inputs and outputs are bound with IOBinding to OrtValues that already live on the device
(outputs preallocated), so a timed run is the kernel plus the run's fixed cost and nothing else;
on a GPU every run is synchronized (`Run` waits for the device; `synchronize_outputs` again),
never an asynchronous launch. The first run has ONNX Runtime's profiler on: its kernel event says
which provider really ran the node (a fallback to another provider makes the op unsupported on
this device) and, through the 1.31 arena fields, how much scratch memory the kernel took.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import onnxruntime as ort
from onnx import ModelProto, TensorProto, helper

from planner.ir.aliasing import shared_input, view_source_of
from planner.ir.graph import Graph, Op
from planner.profile.devices import Device, create_session
from planner.profile.machine import private_cache_bytes
from planner.profile.single_node import copy_output_name, single_node_model
from planner.profile.timing import (
    CLOCKS,
    Runner,
    Timing,
    TimingPolicy,
    median_time,
    time_kernel,
)


@dataclass(frozen=True)
class OpMeasurement:
    timing: Timing | None  # None: unsupported on this device
    workspace_bytes: int = 0
    reason: str = ""
    in_place: Timing | None = None  # the output written over the input it may share (if timed)


class BoundSession:
    """A session with every input and output bound on the device, runnable without Python data
    movement. `written_over` (output name -> input name) binds an output on that input's bytes,
    as a plan that shares their storage runs it."""

    def __init__(self, session: ort.InferenceSession, device: Device,
                 inputs: dict[str, ort.OrtValue], outputs: dict[str, tuple[tuple, np.dtype]],
                 written_over: Mapping[str, str] | None = None):
        self.session = session
        self.device = device
        self.binding = session.io_binding()
        device_type, device_id = device.ortvalue_device
        for name, value in inputs.items():
            self.binding.bind_ortvalue_input(name, value)
        self._outputs = []
        over = written_over or {}
        for name, (shape, dtype) in outputs.items():
            if name in over:
                self.binding.bind_output(name, device_type, device_id, dtype, list(shape),
                                         inputs[over[name]].data_ptr())
                continue
            value = ort.OrtValue.ortvalue_from_shape_and_type(
                list(shape), dtype, device_type, device_id)
            self._outputs.append(value)
            self.binding.bind_ortvalue_output(name, value)
        if device.is_gpu:
            self.binding.synchronize_inputs()

    def run(self) -> None:
        self.session.run_with_iobinding(self.binding)
        if self.device.is_gpu:
            self.binding.synchronize_outputs()


def kernel_clock(device: Device, threads: int) -> str:
    """The name of the clock kernels on `device` are timed with (planner.profile.timing.CLOCKS):
    on the CPU with one intra-op thread, ONNX Runtime runs every kernel on the calling thread,
    so that thread's CPU time is the kernel's cost and does not grow with the load of a shared
    machine (profiles measured on a busy 2-core machine were up to 2x the step the runtime then
    took); otherwise the wall clock (a GPU run is synchronized; several threads work at once)."""
    return "thread-cpu" if not device.is_gpu and threads == 1 else "wall"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:300]


def device_inputs(graph: Graph, op: Op, values: dict[int, np.ndarray], device: Device
                  ) -> dict[str, ort.OrtValue]:
    device_type, device_id = device.ortvalue_device
    return {
        graph.tensors[t].name: ort.OrtValue.ortvalue_from_numpy(
            np.require(values[t], requirements="C"), device_type, device_id)
        for t in op.input_ids
    }


def _output_specs(graph: Graph, op: Op, values: dict[int, np.ndarray]
                  ) -> dict[str, tuple[tuple, np.dtype]]:
    """Shape and dtype of each output, from the captured values (what the kernel produces)."""
    specs = {}
    for t in op.output_ids:
        value = values.get(t)
        shape = value.shape if value is not None else graph.tensors[t].shape
        dtype = value.dtype if value is not None else np.dtype(graph.tensors[t].dtype)
        specs[graph.tensors[t].name] = (tuple(shape), dtype)
    return specs


def kernel_events(path: str) -> list[dict]:
    """The kernel events of an ONNX Runtime profile file (which is removed after reading)."""
    try:
        with open(path) as handle:
            events = json.load(handle)
    finally:
        try:
            os.remove(path)
        except OSError:
            pass
    return [e for e in events if e.get("cat") == "Node"
            and str(e.get("name", "")).endswith("_kernel_time")]


def workspace_from_event(args: dict) -> int:
    """Scratch bytes of a kernel from the profiler's arena fields: the allocator's peak during the
    node minus what was in use before and after it (outputs are caller-bound, so ~0)."""
    try:
        peak = int(args["mem_in_use_peak"])
        after = int(args["mem_bytes_in_use"])
        before = after - int(args.get("mem_in_use_delta", 0))
    except (KeyError, TypeError, ValueError):
        return 0
    return max(0, peak - max(before, after))


def measure_op(graph: Graph, op: Op, values: dict[int, np.ndarray], device: Device,
               threads: int, policy: TimingPolicy, overhead: float, scratch_dir: str
               ) -> OpMeasurement:
    """Time `op` on `device`, or say why it cannot run there."""
    prefix = os.path.join(scratch_dir, f"op{op.id}_{device.kind}{device.index}")
    try:
        session = create_session(single_node_model(graph, op, 1), device, threads,
                                 profile_prefix=prefix)
    except Exception as exc:  # noqa: BLE001 - NOT_IMPLEMENTED, fallback refused, ...
        return OpMeasurement(None, reason=f"no session on {device.name}: {_first_line(exc)}")
    try:
        inputs = device_inputs(graph, op, values, device)
        one = BoundSession(session, device, inputs, _output_specs(graph, op, values))
        one.run()
    except Exception as exc:  # noqa: BLE001
        return OpMeasurement(None, reason=f"fails to run on {device.name}: {_first_line(exc)}")
    events = kernel_events(session.end_profiling())
    wrong = sorted({str(e.get("args", {}).get("provider")) for e in events}
                   - {device.provider, "None"})
    if wrong:
        return OpMeasurement(
            None, reason=f"falls back from {device.provider} to {', '.join(wrong)}")
    workspace = max((workspace_from_event(e.get("args", {})) for e in events), default=0)

    def make_copies() -> tuple[Runner, int] | None:
        k = policy.copies
        specs = _output_specs(graph, op, values)
        out_bytes = sum(int(np.prod(s)) * np.dtype(d).itemsize for s, d in specs.values())
        if k * out_bytes > policy.max_copies_bytes:
            return None
        try:
            session_k = create_session(single_node_model(graph, op, k), device, threads)
            many = BoundSession(session_k, device, inputs, specs)
            many.run()
        except Exception:  # noqa: BLE001 - copies are an optimization; fall back to one copy
            return None
        return many.run, k

    timing = time_kernel(one.run, make_copies, overhead, policy,
                         CLOCKS[kernel_clock(device, threads)], evict=_evictor(device))
    return OpMeasurement(timing, workspace_bytes=workspace,
                         in_place=_time_in_place(graph, op, values, device, threads, policy,
                                                 overhead))


def _time_in_place(graph: Graph, op: Op, values: dict[int, np.ndarray], device: Device,
                   threads: int, policy: TimingPolicy, overhead: float) -> Timing | None:
    """`op` run with its output on the bytes of the input it may share (planner.ir.aliasing
    .shared_input), as a plan that shares that storage runs it, when the output has at least
    `policy.in_place_above_bytes`; None otherwise, or when that run fails. Kernels skip
    copying that input into the output then (views, scatters, Gemm's addend) and write lines
    they have just read. An op that writes over real data gets the input back before each run
    (untimed): run after run, `x * y` in place would drift into denormals, which are slow."""
    source = shared_input(graph, op)
    if source is None or graph.tensors[op.output_ids[0]].nbytes < policy.in_place_above_bytes:
        return None
    source_name = graph.tensors[source].name
    out_name = graph.tensors[op.output_ids[0]].name
    try:
        inputs = device_inputs(graph, op, values, device)
        shared = BoundSession(create_session(single_node_model(graph, op, 1), device, threads),
                              device, inputs, _output_specs(graph, op, values),
                              written_over={out_name: source_name})
        pristine = np.require(values[source], requirements="C")

        def restore() -> None:
            inputs[source_name].update_inplace(pristine)

        writes = view_source_of(graph, op) is None
        return time_kernel(shared.run, lambda: None, overhead, policy,
                           CLOCKS[kernel_clock(device, threads)],
                           prepare=restore if writes else None, evict=_evictor(device))
    except Exception:  # noqa: BLE001 - the out-of-place figure stands for the op then
        return None


@functools.cache
def _private_cache_filler() -> np.ndarray:
    """Twice the bytes of the core's own cache (planner.profile.machine.private_cache_bytes)."""
    return np.zeros(2 * private_cache_bytes() // 4, np.float32)


def _evictor(device: Device) -> Runner | None:
    """What pushes an op's operands out of the core's own cache before a direct run (see
    planner.profile.timing): on the CPU, writing twice that cache's bytes; on a GPU nothing (its
    kernels read operands from device memory through a cache the host does not reach)."""
    if device.is_gpu:
        return None
    filler = _private_cache_filler()

    def evict() -> None:
        filler.fill(filler[0] + 1.0)

    return evict


def run_overhead(device: Device, threads: int, policy: TimingPolicy) -> float:
    """The fixed cost of one bound session run on `device` (seconds), without the kernel: the
    one-copy time of a 4-byte Identity minus its differential kernel time."""
    def identity(copies: int) -> ModelProto:
        f = TensorProto.FLOAT
        nodes = [helper.make_node("Identity", ["x"], [copy_output_name("y", k)])
                 for k in range(copies)]
        graph = helper.make_graph(nodes, "overhead", [helper.make_tensor_value_info("x", f, [1])],
                                  [helper.make_tensor_value_info("y", f, [1])])
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                 ir_version=10)

    device_type, device_id = device.ortvalue_device
    x = {"x": ort.OrtValue.ortvalue_from_numpy(np.zeros(1, np.float32), device_type, device_id)}
    spec = np.dtype(np.float32)
    one = BoundSession(create_session(identity(1), device, threads), device, x,
                        {"y": ((1,), spec)})
    k = policy.copies
    many = BoundSession(create_session(identity(k), device, threads), device, x,
                         {"y": ((1,), spec)})
    differential = TimingPolicy(
        warmup_runs=max(policy.warmup_runs, 5), batch=10, min_repeats=30, max_repeats=400,
        rel_tolerance=0.05, max_seconds_per_op=max(policy.max_seconds_per_op, 0.2), copies=k,
        direct_above_seconds=float("inf"))
    clock = CLOCKS[kernel_clock(device, threads)]
    kernel = time_kernel(one.run, lambda: (many.run, k), 0.0, differential, clock)
    return max(0.0, median_time(one.run, 51, clock) - kernel.median)
