"""Kernel scratch of every op from one whole-graph ONNX Runtime session, for plans made without
a profile (keeping everything fit the budget, so no op was measured on its own).

A plan's `workspace_bytes` otherwise comes from the per-op profile (planner.profile.op_runner),
and a plan without one would reserve nothing for what kernels allocate beside the arena. Here the
graph runs in one session on the device with ONNX Runtime's profiler on, and every node's kernel
event gives its arena fields, read as the per-op profile reads them (`workspace_from_event`).

Two facts of a whole-graph session shape the measurement (ONNX Runtime 1.31, checked on the
fixtures):
- The arena's peak (`mem_in_use_peak`) is the session's running peak, never reset per node nor
  per run. In a first run it is dominated by the values live at the graph's widest point, and
  ONNX Runtime allocates every output (`mem_in_use_delta` is the node's outputs; its inputs are
  released after its event), so "peak minus what is in use around the node" is not its scratch.
- From the second run on, the memory pattern of the first holds every intermediate value in one
  block allocated before the first node, so what is in use stays one figure B from node to node
  (outputs and released inputs live in the block); with the graph's outputs bound by the caller
  and its inputs fed from caller memory nothing else enters the arena, and a node's
  `peak - max(before, after)` is `P - B`, P the running peak.

So the second run's figure of a node is the running maximum of the scratch taken so far (exact
at every node where it rises, an upper bound elsewhere), and its last figure is the largest
scratch of any node. Per op the figures are upper bounds, so a device's workspace aggregated from
them (planner.profile.workspace) never falls short of the scratch of the ops placed there. The
first run's peak carries over, and it may exceed B plus the largest scratch: a BFC chunk handed
out whole (not split for a request over half its size) counts as in use, so the first run's
values can take more than the block. The figures are then bounded by that carried peak instead,
and `loose` says so (GPT-2 small without graph optimizations: a 154 MB tensor in a 256 MiB chunk,
every figure 127.6 MB where the per-op profile measures 8.4 MB at most; with the extended
optimizations `arenaplan plan` applies by default it is not loose: 7.3 MB). On the fixtures
(mlp_sgd, cnn_bn_momentum, gpt2_tiny_adam, unet_small) the largest figure equals the per-op
profile's largest and no op's figure is below its profile's. A figure can be below the per-op
profile's where the latter counts a fresh arena's whole first region: a single-node session
serves a 7.4 MiB request from an 8 MiB region it does not split, while the whole graph's arena
splits a larger one (MobileNetV2's largest Where: 7,733,248 B here, 8,388,608 B per op; at the
other nodes where the running maximum rises the two agree).

A measurement is not started when its estimated cost (planner.profile.graph_workspace_cost:
drawing the inputs and building the session cannot be interrupted) does not fit `time_limit_s`,
nor a CPU session when the host's available memory cannot hold the step; the runs are stopped in
time for the slowest op to end by the limit (ONNX Runtime's `terminate` run option, checked
between nodes). Each leaves no figures, and the plan reserves a conservative bound from the
ops' shapes instead (planner.profile.workspace_bound), saying so in its notes.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import onnxruntime as ort

from planner.ir.graph import Graph
from planner.profile.cache import ProfileCache, default_cache_path
from planner.profile.costs import measured_as
from planner.profile.devices import Device, create_session, parse_device
from planner.profile.graph_workspace_cost import measurement_cost
from planner.profile.host_memory import available_host_bytes
from planner.profile.inputs import graph_input_values
from planner.profile.machine import cpu_model, fingerprint, gpu_name
from planner.profile.op_runner import BoundSession, kernel_events, workspace_from_event
from planner.profile.workspace import device_workspace, set_workspace
from planner.profile.workspace_bound import op_scratch_bound
from schemas.plan import Plan

# Runs of the session: the first lays out ONNX Runtime's memory pattern, the second is read.
RUNS = 2


@dataclass(frozen=True)
class GraphWorkspace:
    """Per-op scratch on one device from a whole-graph session (`scratch`: op id -> bytes, an
    upper bound per op whose maximum is the graph's largest scratch unless `loose`: the first
    run's carried-over peak bounds them), or why there is none (`reason`)."""

    device: str
    scratch: dict[int, int] = field(default_factory=dict)
    seconds: float = 0.0
    loose: bool = False
    reason: str = ""  # non-empty: not measured, and why
    cached: bool = False  # taken from the profile cache (`seconds`: when it was measured)

    @property
    def measured(self) -> bool:
        return not self.reason

    @property
    def largest(self) -> int:
        return max(self.scratch.values(), default=0)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:300]


def node_ops(graph: Graph) -> list[int | None]:
    """The op id of every node of `graph.proto`, by its position (ONNX Runtime's node index in a
    session without graph optimizations); None for a node without outputs."""
    found: list[int | None] = []
    for node in graph.proto.graph.node:
        named = next((name for name in node.output if name), None)
        found.append(graph.tensor(named).producer if named is not None else None)
    return found


def _bound(session: ort.InferenceSession, graph: Graph, device: Device,
           values: Mapping[int, np.ndarray]) -> BoundSession:
    """`session` with the graph inputs fed from `values` on the device and every graph output
    bound to a caller-owned value, so that neither lives in the session's arena."""
    device_type, device_id = device.ortvalue_device
    inputs = {graph.tensors[t].name: ort.OrtValue.ortvalue_from_numpy(
        np.require(values[t], requirements="C"), device_type, device_id) for t in graph.inputs}
    outputs = {graph.tensors[t].name: (graph.tensors[t].shape, np.dtype(graph.tensors[t].dtype))
               for t in graph.outputs}
    return BoundSession(session, device, inputs, outputs)


def _run(bound: BoundSession, time_limit_s: float | None) -> None:
    """RUNS runs of `bound`, stopped by ONNX Runtime (an exception) once `time_limit_s` pass
    (at the end of the node running then)."""
    options = ort.RunOptions()
    timer = None
    if time_limit_s is not None and time_limit_s <= 0:
        options.terminate = True  # no time left: the first node stops the run
    elif time_limit_s is not None:
        timer = threading.Timer(time_limit_s, setattr, (options, "terminate", True))
        timer.start()
    try:
        for _ in range(RUNS):
            bound.session.run_with_iobinding(bound.binding, options)
            if bound.device.is_gpu:
                bound.binding.synchronize_outputs()
    finally:
        if timer is not None:
            timer.cancel()


def _read(events: list[dict], device: Device, ops: list[int | None]
          ) -> tuple[dict[int, int], bool]:
    """Per-op figures of the last run's kernel events on `device`, and whether the first run's
    peak bounds them (the last run's peak never rose above it)."""
    mine = [e.get("args", {}) for e in events
            if e.get("args", {}).get("provider") == device.provider]
    per_run = len(mine) // RUNS
    first, last = mine[:len(mine) - per_run], mine[len(mine) - per_run:]
    carried = max((int(a.get("mem_in_use_peak", 0)) for a in first), default=0)
    scratch: dict[int, int] = {}
    for args in last:
        index = int(args.get("node_index", -1))
        op_id = ops[index] if 0 <= index < len(ops) else None
        if op_id is not None:
            scratch[op_id] = workspace_from_event(args)
    rose = any(int(a.get("mem_in_use_peak", 0)) > carried for a in last)
    return scratch, not rose and any(scratch.values())


def host_bytes_needed(graph: Graph, live_bytes: int) -> int:
    """The least host memory a CPU session of the whole graph holds: the inputs fed, the
    outputs bound and `live_bytes` of intermediate values (a plan's arenas)."""
    return sum(graph.tensors[t].nbytes for t in (*graph.inputs, *graph.outputs)) + live_bytes


def measure_graph_workspace(graph: Graph, device: Device, threads: int = 1,
                            values: Mapping[int, np.ndarray] | None = None,
                            time_limit_s: float | None = None,
                            live_bytes: int = 0) -> GraphWorkspace:
    """Each op's scratch on `device` from one session of the whole graph, run RUNS times on
    `values` (graph input id -> value; generated as the profiler generates them when None).
    A device that cannot run the graph, a measurement whose estimated cost does not fit
    `time_limit_s` (on a GPU only its setup is priced: the CPU's roofline says nothing of its
    runs), runs stopped to end by `time_limit_s`, or a CPU session that would not fit in the
    host's available memory with `live_bytes` of intermediates (a planning machine smaller than
    the training one: the process would be killed, not refused), give a GraphWorkspace with the
    reason and no figures."""
    started = time.perf_counter()
    if graph.proto is None:  # a node-link graph (planner.ir.graph_json): no model to run
        return GraphWorkspace(device.name, reason="no ONNX model behind the graph")
    available = None if device.is_gpu else available_host_bytes()
    needed = host_bytes_needed(graph, live_bytes)
    if available is not None and needed > available:
        return GraphWorkspace(device.name, reason=f"the session needs at least {needed} B of "
                                                  f"host memory, {available} B are available")
    cost = measurement_cost(graph, threads, draw_inputs=values is None)
    estimate = cost.setup_s if device.is_gpu else cost.total(RUNS)
    if time_limit_s is not None and estimate > time_limit_s:
        return GraphWorkspace(device.name, reason=(
            f"estimated to take {estimate:.1f} s ({cost.setup_s:.1f} s for inputs and session, "
            f"{RUNS} runs of {cost.step_s:.1f} s), {max(0.0, time_limit_s):.1f} s left"))
    feeds = graph_input_values(graph) if values is None else values
    with tempfile.TemporaryDirectory(prefix="arenaplan-workspace-") as scratch_dir:
        try:
            session = create_session(graph.proto, device, threads,
                                     profile_prefix=f"{scratch_dir}/graph")
        except Exception as exc:  # noqa: BLE001 - no provider, an op it cannot run, ...
            return GraphWorkspace(device.name, reason=f"no session on {device.name}: "
                                                      f"{_first_line(exc)}")
        try:
            left = None if time_limit_s is None else (
                time_limit_s - (time.perf_counter() - started)
                - (0.0 if device.is_gpu else cost.longest_op_s))  # the node running at a stop
            _run(_bound(session, graph, device, feeds), left)
        except Exception as exc:  # noqa: BLE001 - terminated, or an op that fails to run
            session.end_profiling()
            limit = "none" if time_limit_s is None else f"{time_limit_s:.1f} s"
            return GraphWorkspace(device.name, seconds=time.perf_counter() - started,
                                  reason=f"the graph did not run on {device.name} (time limit "
                                         f"{limit}): {_first_line(exc)}")
        events = kernel_events(session.end_profiling())
    scratch, loose = _read(events, device, node_ops(graph))
    return GraphWorkspace(device.name, scratch, time.perf_counter() - started, loose)


def graph_workspaces(graph: Graph, devices: list[str], threads: int = 1,
                     time_limit_s: float | None = None, live_bytes: int = 0
                     ) -> dict[str, GraphWorkspace]:
    """A whole-graph measurement per device that `devices` (plan device names) run on: `cpu:N`
    arenas share the CPU's, and a GPU this machine cannot run gives a reason, no figures. All
    of them together stop at `time_limit_s`; `live_bytes`: the intermediates a step holds.
    Measurements are kept in the profile cache (`cache_key`): GPT-2-small's takes 16 s and
    gigabytes, once per graph, machine and ONNX Runtime version."""
    deadline = None if time_limit_s is None else time.perf_counter() + time_limit_s
    found = {}
    with ProfileCache(default_cache_path()) as cache:
        for name in dict.fromkeys(measured_as(d) for d in devices):
            device = parse_device(name)
            key = cache_key(graph, device, threads)
            cached = cache.get_value(key)
            if cached is not None:
                found[name] = _from_json(name, cached)
                continue
            left = None if deadline is None else deadline - time.perf_counter()
            found[name] = measure_graph_workspace(graph, device, threads, time_limit_s=left,
                                                  live_bytes=live_bytes)
            if found[name].measured:
                cache.put_value(key, _to_json(found[name]))
    return found


def cache_key(graph: Graph, device: Device, threads: int) -> str:
    """What a whole-graph measurement depends on: the graph run (the model, ONNX Runtime's
    rewrite of it and every tensor's shape), the device, the threads, ONNX Runtime's version
    and the machine (planner.profile.machine)."""
    gpus = {"gpu": gpu_name(device.index)} if device.is_gpu else {}
    text = json.dumps([
        graph.model_sha256, graph.optimized.sha256 if graph.optimized else None,
        [list(t.shape) for t in graph.tensors], device.provider, device.index, threads,
        ort.__version__, fingerprint(cpu_model(), os.cpu_count() or 1, gpus), RUNS])
    return "graph-workspace:" + hashlib.sha256(text.encode()).hexdigest()


def _to_json(found: GraphWorkspace) -> str:
    return json.dumps({"scratch": found.scratch, "seconds": found.seconds,
                       "loose": found.loose})


def _from_json(device: str, text: str) -> GraphWorkspace:
    data = json.loads(text)
    return GraphWorkspace(device, {int(k): int(v) for k, v in data["scratch"].items()},
                          float(data["seconds"]), bool(data["loose"]), cached=True)


def _note(found: GraphWorkspace, reserved: int, has_model: bool) -> str:
    if not found.measured and not has_model:
        return f"workspace: not measured ({found.reason}); 0 B reserved for kernel scratch"
    if not found.measured:
        return (f"workspace: not measured ({found.reason}); {reserved} B reserved for kernel "
                "scratch, a conservative bound from the ops' shapes (twice an op's largest "
                "operand or convolution column buffer, rounded up to a power of two, for op "
                "types that may take scratch: planner.profile.workspace_bound)")
    bound = ("; an upper bound: the first run's peak carried over" if found.loose else "")
    cached = ", from the profile cache" if found.cached else ""
    return (f"workspace: {reserved} B reserved for kernel scratch, measured without a profile "
            f"by one whole-graph ONNX Runtime session on {found.device} ({RUNS} runs, "
            f"{found.seconds:.2f} s{cached}; largest op scratch {found.largest} B{bound})")


def _with_note(plan: Plan, device: str, note: str) -> Plan:
    """`plan` with `note` added to the report of `device`'s layout (else to its last report)."""
    reports = list(plan.solvers)
    at = next((k for k, r in enumerate(reports) if r.phase == "layout" and r.device == device),
              len(reports) - 1)
    if at < 0:
        return plan
    reports[at] = reports[at].model_copy(update={"notes": [*reports[at].notes, note]})
    return plan.model_copy(update={"solvers": reports})


def with_graph_workspace(graph: Graph, plan: Plan, threads: int = 1,
                         time_limit_s: float | None = None) -> Plan:
    """`plan` with every device's `workspace_bytes` from whole-graph sessions (within
    `time_limit_s`), else from the ops' shape bound (planner.profile.workspace_bound; a graph
    with no ONNX model behind it runs no kernels and reserves 0), and a note per device saying
    how it was obtained (or why it was not measured)."""
    found = graph_workspaces(graph, [d.device for d in plan.devices], threads, time_limit_s,
                             live_bytes=sum(d.arena_bytes for d in plan.devices))
    has_model = graph.proto is not None

    def scratch_of(op_id: int, device: str) -> int:
        measured = found[measured_as(device)]
        if measured.measured or not has_model:
            return measured.scratch.get(op_id, 0)
        return op_scratch_bound(graph, graph.ops[op_id], device)

    reserved = device_workspace(graph, plan, scratch_of)
    plan = set_workspace(plan, reserved)
    for d in plan.devices:
        plan = _with_note(plan, d.device, _note(found[measured_as(d.device)], reserved[d.device],
                                                has_model))
    return plan
