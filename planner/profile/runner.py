"""`profile_graph`: per-op costs of a graph on each device, from the cache or measured now.

Steps: check each device by creating a real session on it; look every (op, device) up in the
persistent cache; for the rest, measure each distinct op signature once per device
(planner.profile.op_runner) on real input values, captured a chunk of ops at a time within a
memory allowance (planner.profile.capture_plan, planner.profile.inputs); give ops that no device
can run a labelled roofline estimate; measure copy costs between devices; assemble the
`schemas.profile.Profile`.

With a time limit, measuring stops when it is spent: a chunk's capture (a run of the graph,
which cannot be stopped) is not started when its estimated cost
(planner.profile.graph_workspace_cost) does not fit, and no op is measured whose timing cap would
pass the deadline. What is left unmeasured, and an op whose inputs alone exceed the memory
allowance, gets the same labelled roofline estimate, with the conservative scratch bound of
planner.profile.workspace_bound as its workspace, and is not cached.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import onnxruntime as ort

from planner.errors import InvalidInputError
from planner.ir.graph import Graph, Op
from planner.profile import estimate
from planner.profile.cache import CachedCost, CacheKey, ProfileCache, default_cache_path
from planner.profile.capture_plan import plan_capture
from planner.profile.copies import DEFAULT_SIZES, measure_copies
from planner.profile.devices import Device, check_device, parse_devices
from planner.profile.graph_workspace_cost import measurement_cost
from planner.profile.host_memory import capture_allowance_bytes
from planner.profile.host_speed import speed_epoch
from planner.profile.inputs import capture_tensors, producers_of, resident_values
from planner.profile.machine import describe_machine, fingerprint
from planner.profile.op_runner import kernel_clock, measure_op, run_overhead
from planner.profile.progress import ProgressCallback, ProgressEvent
from planner.profile.signature import op_signature
from planner.profile.timing import DEFAULT_POLICY, TimingPolicy
from planner.profile.workspace_bound import op_scratch_bound
from schemas.profile import (
    CacheStats,
    MachineInfo,
    OpCost,
    OpProfile,
    Profile,
    Roofline,
    TimingSettings,
)
from schemas.units import format_bytes

DEFAULT_CACHE = "default"
TIMING_METHOD = (
    "single-node ONNX Runtime session per op, inputs/outputs bound on the device (IOBinding), "
    "synchronized runs; ops under the direct threshold timed differentially (k copies minus one "
    "copy, divided by k-1), slower ops as one run minus the calibrated run overhead; clock: the "
    "calling thread's CPU time on the CPU with one intra-op thread, else wall time"
)

CacheArg = ProfileCache | str | Path | None


def _open_cache(cache: CacheArg) -> tuple[ProfileCache | None, bool]:
    """(cache, whether we opened it and must close it)."""
    if cache is None:
        return None, False
    if isinstance(cache, ProfileCache):
        return cache, False
    path = default_cache_path() if cache == DEFAULT_CACHE else Path(cache)
    return ProfileCache(path), True


def device_fingerprint(machine: MachineInfo, device: Device) -> str:
    gpus = {"gpu": machine.gpus[device.name]} if device.is_gpu else {}
    return fingerprint(machine.cpu_model, machine.cpu_cores, gpus)


def _cached_as(machine: MachineInfo, targets: Sequence[Device], store: ProfileCache | None,
               threads: int, report: Callable[..., None]) -> dict[str, str]:
    """Each device's machine in the cache keys: its fingerprint and, with a cache, the speed
    epoch whose costs it may reuse now (planner.profile.host_speed), reported when the speed
    moved since the costs cached for it were measured."""
    machines = {}
    for device in targets:
        name = device_fingerprint(machine, device)
        if store is not None:
            epoch = speed_epoch(store, name, device, threads)
            name = f"{name} @speed {epoch.name}"
            if epoch.drift is not None:
                report("speed", 1, 1, f"{device.name} runs its reference kernel in "
                       f"{epoch.drift:.2f}x the time recorded with the costs cached for it: "
                       "measuring them again")
        machines[device.name] = name
    return machines


def _to_cost(cost: CachedCost, cached: bool) -> OpCost:
    return OpCost(source="measured", median_seconds=cost.median_s, spread_seconds=cost.spread_s,
                  repeats=cost.repeats, workspace_bytes=cost.workspace_bytes, cached=cached,
                  in_place_seconds=cost.in_place_s)


def _validate_inputs(inputs: Mapping[str, np.ndarray] | None) -> dict[str, np.ndarray] | None:
    if inputs is None:
        return None
    if not isinstance(inputs, Mapping):
        raise InvalidInputError("inputs must map graph input names to arrays")
    return {str(k): np.asarray(v) for k, v in inputs.items()}


def profile_graph(
    graph: Graph,
    devices: Sequence[str] = ("cpu",),
    *,
    threads: int = 1,
    inputs: Mapping[str, np.ndarray] | None = None,
    cache: CacheArg = DEFAULT_CACHE,
    progress: ProgressCallback | None = None,
    policy: TimingPolicy = DEFAULT_POLICY,
    rooflines: Mapping[str, Roofline] | None = None,
    copy_sizes: Sequence[int] = DEFAULT_SIZES,
    time_limit_s: float | None = None,
    memory_allowance_bytes: int | None = None,
) -> Profile:
    """Measure every op of `graph` on every device in `devices` ("cpu", "cuda:N").

    `inputs` gives values for graph inputs by name (the rest are generated); `cache` is
    "default" (the user's cache file), a path, an open ProfileCache, or None for no caching;
    `progress` receives ProgressEvents; `rooflines` (device -> Roofline) configures the
    analytical fallback instead of measuring it; `time_limit_s` stops the measuring of ops
    (those left get the analytical fallback, labelled "estimated"); `memory_allowance_bytes`
    bounds the captured input values held at once (default: a share of the host's available
    memory, planner.profile.host_memory; ops reading more get the fallback too).
    """
    started = time.perf_counter()
    deadline = None if time_limit_s is None else started + time_limit_s
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
        raise InvalidInputError(f"threads must be a positive integer, got {threads!r}")
    given = _validate_inputs(inputs)
    targets = parse_devices([devices] if isinstance(devices, str) else devices)
    providers = {d.name: check_device(d, threads) for d in targets}
    machine = describe_machine(targets, threads, providers)
    store, owned = _open_cache(cache)

    def report(phase: str, done: int, total: int, message: str = "", hits: int = 0) -> None:
        if progress is not None:
            progress(ProgressEvent(phase, done, total, message, hits,
                                   time.perf_counter() - started))

    try:
        machines = _cached_as(machine, targets, store, threads, report)
        stats, profiles = _measure_all(graph, targets, machines, store, given, threads, policy,
                                       report, deadline, memory_allowance_bytes)
        if any(_missing(p, targets) for p in profiles):
            roofs = _rooflines(targets, machines, store, threads, rooflines or {})
            _estimate_missing(graph, profiles, targets, roofs)
        else:
            roofs = {}
        report("copies", 0, 1)
        copies = measure_copies(targets, copy_sizes)
        report("copies", 1, 1)
    finally:
        if owned and store is not None:
            store.close()
    profile = Profile(
        model_sha256=graph.model_sha256,
        graph_name=graph.name,
        devices=[d.name for d in targets],
        ops=profiles,
        copies=copies,
        rooflines=roofs,
        machine=machine,
        timing=TimingSettings(
            method=TIMING_METHOD, warmup_runs=policy.warmup_runs,
            min_repeats=policy.min_repeats, max_repeats=policy.max_repeats,
            rel_tolerance=policy.rel_tolerance, max_seconds_per_op=policy.max_seconds_per_op,
        ),
        cache=CacheStats(path=str(store.path) if store is not None else None,
                         hits=stats["hits"], misses=stats["misses"],
                         deduplicated=stats["deduplicated"]),
        total_seconds=time.perf_counter() - started,
    )
    unmeasured = f", {stats['unmeasured']} left to estimates: out of time" if stats[
        "unmeasured"] else ""
    if stats["over_allowance"]:
        unmeasured += (f", {stats['over_allowance']} left to estimates: their inputs exceed the "
                       f"capture's memory allowance of {format_bytes(stats['allowance'])}")
    report("done", 1, 1, f"{len(graph.ops)} ops on {', '.join(profile.devices)} in "
           f"{profile.total_seconds:.1f}s ({stats['hits']} cache hits, {stats['misses']} "
           f"measured{unmeasured})", stats["hits"])
    return profile


def _measure_all(graph: Graph, targets: list[Device], machines: Mapping[str, str],
                 store: ProfileCache | None, given: dict[str, np.ndarray] | None, threads: int,
                 policy: TimingPolicy, report: Callable[..., None], deadline: float | None,
                 allowance_bytes: int | None) -> tuple[dict[str, int], list[OpProfile]]:
    """The cached and newly measured costs of every (op, device), and the counts of cache hits,
    measurements, signatures measured once for several ops, and ops left unmeasured (no entry
    for that device): out of time, or reading more than the capture's memory allowance.
    `machines`: each device's machine in the cache keys (_cached_as)."""
    signatures = [op_signature(graph, op) for op in graph.ops]
    profiles = [OpProfile(op_id=op.id, name=op.name, op_type=op.op_type) for op in graph.ops]
    total = len(graph.ops) * len(targets)
    stats = dict.fromkeys(("hits", "misses", "deduplicated", "unmeasured", "over_allowance",
                           "allowance"), 0)
    pending: list[tuple[Op, Device, CacheKey]] = []

    def record(op: Op, device: Device, cost: CachedCost, cached: bool) -> None:
        entry = profiles[op.id]
        if cost.supported:
            entry.costs[device.name] = _to_cost(cost, cached)
        else:
            entry.unsupported[device.name] = cost.reason

    keys = {(op.id, device.name): CacheKey(signatures[op.id], op.op_type, device.provider,
                                           threads, ort.__version__, machines[device.name],
                                           kernel_clock(device, threads))
            for op in graph.ops for device in targets}
    cached = store.get_many(list(keys.values())) if store is not None else {}
    for op in graph.ops:
        for device in targets:
            key = keys[(op.id, device.name)]
            found = cached.get(key.digest)
            if found is None:
                pending.append((op, device, key))
            else:
                stats["hits"] += 1
                record(op, device, found, cached=True)
    report("ops", stats["hits"], total, "cache lookups", stats["hits"])
    if not pending:
        return stats, profiles
    # One measurement per signature and device; the other ops with that signature share it.
    leaders: dict[tuple[str, str], tuple[Op, Device, CacheKey]] = {}
    for op, device, key in pending:
        leaders.setdefault((key.digest, device.name), (op, device, key))
    by_op: dict[int, list[tuple[Device, CacheKey]]] = {}
    for op, device, key in leaders.values():
        by_op.setdefault(op.id, []).append((device, key))
    allowance = allowance_bytes if allowance_bytes is not None else capture_allowance_bytes(
        sum(t.nbytes for t in graph.tensors if t.producer is None))
    plan = plan_capture(graph, [graph.ops[i] for i in by_op], allowance)
    stats["allowance"] = -1 if allowance is None else allowance
    if plan.over_allowance:
        report("capture", 0, len(plan.chunks), f"{len(plan.over_allowance)} ops read more than "
               f"the capture's memory allowance of {format_bytes(allowance or 0)}: estimated")
    memo: dict[tuple[str, str], CachedCost] = {}
    done = stats["hits"]
    resident: dict[int, np.ndarray] | None = None
    overheads: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="arenaplan-profile-") as scratch:
        for index, chunk in enumerate(plan.chunks):
            runs = producers_of(graph, chunk.tensors)
            if not _capture_fits(graph, threads, resident is None and given is None, deadline,
                                 runs):
                break
            if resident is None:
                resident = resident_values(graph, given)
                overheads = {d.name: run_overhead(d, threads, policy)
                             for d in {device for _, device, _ in leaders.values()}}
            report("capture", index, len(plan.chunks),
                   f"running {len(runs)} ops for the {format_bytes(chunk.nbytes)} of inputs of "
                   f"{len(chunk.ops)} ops (allowance {_allowance_text(allowance)})")
            values = {**resident, **capture_tensors(graph, resident, chunk.tensors, threads)}
            report("capture", index + 1, len(plan.chunks))
            for op in chunk.ops:
                for device, key in by_op[op.id]:
                    if deadline is not None and (time.perf_counter() + policy.max_seconds_per_op
                                                 >= deadline):  # its timing could overrun
                        continue
                    cost = _measure(graph, op, values, device, threads, policy,
                                    overheads[device.name], scratch)
                    memo[(key.digest, device.name)] = cost
                    stats["misses"] += 1
                    if store is not None:
                        store.put(key, cost)
                    done += 1
                    report("ops", done, total, f"{op.op_type} {op.name} on {device.name}",
                           stats["hits"])
            del values  # released before the next chunk is captured
    over = {op.id for op in plan.over_allowance}
    for op, device, key in pending:
        leader = leaders[(key.digest, device.name)][0]
        found = memo.get((key.digest, device.name))
        if found is None:
            stats["over_allowance" if leader.id in over else "unmeasured"] += 1
            continue
        record(op, device, found, cached=False)
        if leader is not op:
            stats["deduplicated"] += 1
    report("ops", total, total, "", stats["hits"])
    return stats, profiles


def _measure(graph: Graph, op: Op, values: dict[int, np.ndarray], device: Device, threads: int,
             policy: TimingPolicy, overhead: float, scratch: str) -> CachedCost:
    result = measure_op(graph, op, values, device, threads, policy, overhead, scratch)
    if result.timing is None:
        return CachedCost(False, reason=result.reason)
    return CachedCost(True, result.timing.median, result.timing.spread, result.timing.repeats,
                      result.workspace_bytes,
                      in_place_s=None if result.in_place is None else result.in_place.median)


def _allowance_text(allowance: int | None) -> str:
    return "none: the host's available memory is unknown" if allowance is None else (
        format_bytes(allowance))


def _capture_fits(graph: Graph, threads: int, draw_inputs: bool, deadline: float | None,
                  ops: Sequence[Op]) -> bool:
    """Whether the run of `ops` that captures a chunk's inputs, which cannot be stopped, is
    estimated to end before `deadline` (no deadline: it always fits)."""
    if deadline is None:
        return True
    cost = measurement_cost(graph, threads, draw_inputs, ops)
    return time.perf_counter() + cost.total(1) <= deadline


def _missing(entry: OpProfile, targets: Sequence[Device]) -> list[str]:
    """The devices an op has neither a cost nor an unsupported reason for (not measured in
    time), or all of them for an op no device can run."""
    if not entry.costs:
        return [d.name for d in targets]
    return [d.name for d in targets
            if d.name not in entry.costs and d.name not in entry.unsupported]


def _rooflines(targets: list[Device], machines: Mapping[str, str], store: ProfileCache | None,
               threads: int, configured: Mapping[str, Roofline]) -> dict[str, Roofline]:
    roofs: dict[str, Roofline] = {}
    for device in targets:
        if device.name in configured:
            roofs[device.name] = configured[device.name].model_copy(update={"source": "configured"})
            continue
        key = estimate.roofline_cache_key(machines[device.name], device, threads)
        text = store.get_value(key) if store is not None else None
        if text is not None:
            roofs[device.name] = Roofline.model_validate_json(text)
            continue
        roof = estimate.measure_roofline(device, threads)
        if store is not None:
            store.put_value(key, roof.model_dump_json())
        roofs[device.name] = roof
    return roofs


def _estimate_missing(graph: Graph, profiles: list[OpProfile], targets: Sequence[Device],
                      roofs: Mapping[str, Roofline]) -> None:
    """Ops that no device can run get a roofline estimate on every device, ops not measured in
    time on the devices they lack, labelled as such, with the conservative scratch bound."""
    for entry in profiles:
        op = graph.ops[entry.op_id]
        for device_name in _missing(entry, targets):
            entry.costs[device_name] = OpCost(
                source="estimated",
                median_seconds=estimate.estimate_seconds(graph, op, roofs[device_name]),
                spread_seconds=0.0, repeats=0,
                workspace_bytes=op_scratch_bound(graph, op, device_name),
            )
