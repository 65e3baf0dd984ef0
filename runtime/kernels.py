"""ONNX Runtime sessions that run a segment of plan steps straight out of and into the arenas.

For a segment (one or more consecutive compute steps on one device; runtime.segments) a small
model is built from the original nodes (same attributes, same opset imports and IR version as
the model): every value is named after its plan buffer, every buffer the segment reads from
outside is a graph input and every buffer it writes is a graph output. Initializers are not
embedded: the plan preloads each constant into an arena buffer and the op reads it from there.

Each input is bound (IOBinding) to its buffer's pointer and each output to its planned slice
(`bind_output(name, device_type, device_id, element_type, shape, pointer)`), so kernels read and
write the arena itself. Bindings never change (arenas never move), so a step is only
`run_with_iobinding`. Sessions are cached by the segment model's bytes and device: a recomputed
op reuses the session of its first run.

Session settings: no per-session CPU memory arena and no memory pattern (no session keeps a
pool of its own), sequential execution in priority-based order, an explicit intra-op thread
count, and graph optimizations off by default (the plan already fixed the ops; optimizing would
only fold or fuse across planned buffers). On a GPU, nodes the CUDA provider cannot run fall
back to the CPU provider as in any onnxruntime session (their inputs and outputs are copied by
onnxruntime).

Kernel scratch (the plan's per-device `workspace_bytes`) comes from memory sized to it: on the
host, sessions created inside `KernelSessions.building` take it from one ONNX Runtime arena
whose first region is the executor's workspace, kept from step to step (runtime.host_workspace;
a plan without a measured workspace leaves it to malloc). On a GPU every session of the device
takes its memory from the device's workspace zone in the arena (runtime.arena.WorkspaceZone, the
CUDA provider's external allocator): a kernel asking for more than the zone has left fails the
step instead of allocating outside the plan; a plan without a measured workspace (0) leaves the
CUDA provider its own arena. One op runs at a time, so one workspace per device holds every
op's scratch.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import onnxruntime as ort
from onnx import NodeProto, ValueInfoProto, helper

from runtime.arena import Arena
from runtime.devices import CUDA_PROVIDER, RuntimeDevice
from runtime.errors import DeviceUnavailableError, PlanCheckError
from runtime.host_workspace import USE_ENV_ALLOCATORS, host_workspace
from runtime.model import RuntimeModel
from runtime.segments import Segment
from schemas.plan import BufferSpec, ComputeStep, Step

OPTIMIZATION_LEVELS = {
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}


@dataclass(frozen=True)
class KernelOptions:
    threads: int = 1
    optimization: str = "disable"  # a key of OPTIMIZATION_LEVELS


def session_options(options: KernelOptions, device: RuntimeDevice, *,
                    host_arena: bool = False) -> ort.SessionOptions:
    """`host_arena`: take CPU memory from the arena registered by runtime.host_workspace."""
    so = ort.SessionOptions()
    so.graph_optimization_level = OPTIMIZATION_LEVELS[options.optimization]
    so.intra_op_num_threads = options.threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.enable_cpu_mem_arena = False
    so.enable_mem_pattern = False
    so.log_severity_level = 3
    # Kahn's algorithm by node index: a segment's nodes run in the plan's order (runtime.segments)
    so.execution_order = ort.ExecutionOrder.PRIORITY_BASED
    if host_arena:
        so.add_session_config_entry(USE_ENV_ALLOCATORS, "1")
    return so


def keeps_plan_order(options: KernelOptions, device: RuntimeDevice) -> bool:
    """Whether a segment session on `device` runs its nodes in the order they were added.

    Needs node indices untouched by graph rewrites (optimizations off) and one stream (host).
    """
    return options.optimization == "disable" and not device.is_cuda


@dataclass(frozen=True)
class SegmentModel:
    data: bytes
    inputs: dict[str, str]  # value name -> buffer id
    outputs: dict[str, str]


def segment_model(model: RuntimeModel, steps: list[Step], segment: Segment,
                  buffers: dict[str, BufferSpec]) -> SegmentModel:
    """The segment as a standalone ONNX model whose values are named after plan buffers."""
    names: dict[str, str] = {}

    def name_of(b_id: str) -> str:
        if b_id not in names:
            names[b_id] = f"v{len(names)}"
        return names[b_id]

    nodes: list[NodeProto] = []
    inputs: dict[str, str] = {}
    outputs: dict[str, str] = {}
    for local, index in enumerate(segment.steps):
        step = steps[index]
        assert isinstance(step, ComputeStep)
        original = model.nodes[step.op_id]
        node = NodeProto()
        node.CopyFrom(original)
        node.name = f"s{local}_{original.name or original.op_type}"
        del node.input[:]
        del node.output[:]
        for b_id in step.inputs:
            if b_id is None:
                node.input.append("")
                continue
            if b_id not in names:
                inputs[name_of(b_id)] = b_id
            node.input.append(name_of(b_id))
        for k, (name, b_id) in enumerate(zip(original.output, step.outputs, strict=True)):
            if b_id is None:
                # An output the plan does not keep: onnxruntime allocates it for the kernel.
                node.output.append(f"unkept{local}_{k}" if name else "")
                continue
            outputs[name_of(b_id)] = b_id
            node.output.append(name_of(b_id))
        nodes.append(node)

    def info(value: str, b_id: str) -> ValueInfoProto:
        b = buffers[b_id]
        elem = helper.np_dtype_to_tensor_dtype(np.dtype(b.dtype))
        return helper.make_tensor_value_info(value, elem, list(b.shape))

    graph = helper.make_graph(
        nodes, "arenaplan_segment",
        [info(v, b) for v, b in inputs.items()],
        [info(v, b) for v, b in outputs.items()],
    )
    proto = helper.make_model(graph, opset_imports=list(model.opset_imports),
                              ir_version=model.ir_version)
    return SegmentModel(proto.SerializeToString(), inputs, outputs)


def providers(arena: Arena) -> list:
    """The session's providers: on a GPU with a workspace zone, the zone is its allocator."""
    listed = arena.device.providers()
    if arena.device.is_cuda and arena.zone is not None:
        name, options = listed[0]
        listed[0] = (name, {**options, **arena.zone.provider_options()})
    return listed


class KernelSessions:
    """Builds and caches sessions; returns for each segment a function that runs it in place."""

    def __init__(self, model: RuntimeModel, options: KernelOptions = KernelOptions()):
        self.model = model
        self.options = options
        self._sessions: dict[tuple[str, str, int], ort.InferenceSession] = {}
        self._keep: list[object] = []  # sessions referenced by the runners
        self.bindings: list[tuple[ort.IOBinding, list[str]]] = []  # binding, output buffer ids
        self._run_options = ort.RunOptions()
        self._run_options.log_severity_level = 3
        self._host_arena = False  # inside `building` with a host workspace registered

    @contextmanager
    def building(self, host_workspace_bytes: int) -> Iterator[None]:
        """Create the runners inside: host sessions then share one arena of
        `host_workspace_bytes` for their scratch (runtime.host_workspace; 0: malloc)."""
        with host_workspace(host_workspace_bytes) as bounded:
            self._host_arena = bounded
            try:
                yield
            finally:
                self._host_arena = False

    @property
    def session_count(self) -> int:
        return len(self._sessions)

    def runner(self, steps: list[Step], segment: Segment, buffers: dict[str, BufferSpec],
               arenas: dict[str, Arena]) -> Callable[[], None]:
        built = segment_model(self.model, steps, segment, buffers)
        arena = arenas[segment.device]
        device = arena.device
        session = self._session(built.data, arena, steps, segment)
        binding = session.io_binding()
        dev_type, dev_id = device.ort_device
        for value, b_id in built.inputs.items():
            b = buffers[b_id]
            binding.bind_input(value, dev_type, dev_id, _elem(b), list(b.shape),
                               arena.pointer(b.offset))
        for value, b_id in built.outputs.items():
            b = buffers[b_id]
            binding.bind_output(value, dev_type, dev_id, _elem(b), list(b.shape),
                                arena.pointer(b.offset))
        self._keep.append(session)
        self.bindings.append((binding, list(built.outputs.values())))
        return functools.partial(session._sess.run_with_iobinding, binding._iobinding,
                                 self._run_options)

    def _session(self, data: bytes, arena: Arena, steps: list[Step],
                 segment: Segment) -> ort.InferenceSession:
        device = arena.device
        key = (hashlib.sha256(data).hexdigest(), *device.ort_device)
        session = self._sessions.get(key)
        if session is not None:
            return session
        try:
            session = ort.InferenceSession(
                data, session_options(self.options, device,
                                      host_arena=self._host_arena and not device.is_cuda),
                providers=providers(arena),
            )
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises several unrelated types
            first = steps[segment.steps[0]]
            text = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
            raise PlanCheckError(
                f"onnxruntime cannot run step {segment.steps[0]} "
                f"({getattr(first, 'op_name', '?')}, {len(segment.steps)} op segment) on "
                f"{device.name} as planned: {text}"
            ) from None
        if device.is_cuda and CUDA_PROVIDER not in session.get_providers():
            raise DeviceUnavailableError(
                f"onnxruntime did not give {device.name} its CUDA provider"
            )
        self._sessions[key] = session
        return session


def _elem(b: BufferSpec) -> int:
    return helper.np_dtype_to_tensor_dtype(np.dtype(b.dtype))
