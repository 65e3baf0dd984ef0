"""`profile_graph`: per-op costs of a graph on each device, from the cache or measured now.

Steps: check each device by creating a real session on it; look every (op, device) up in the
persistent cache; for the rest, capture real input values once (planner.profile.inputs) and
measure each distinct op signature once per device (planner.profile.op_runner); give ops that no
device can run a labelled roofline estimate; measure copy costs between devices; assemble the
`schemas.profile.Profile`.

With a time limit, measuring stops when it is spent: the capture (one whole-graph run, which
cannot be stopped) is not started when its estimated cost (planner.profile.graph_workspace_cost)
does not fit, and no op is measured whose timing cap would pass the deadline. What is left
unmeasured gets the same labelled roofline estimate, with the conservative scratch bound of
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
from planner.profile.copies import DEFAULT_SIZES, measure_copies
from planner.profile.devices import Device, check_device, parse_devices
from planner.profile.graph_workspace_cost import measurement_cost
from planner.profile.inputs import capture_values
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


def _to_cost(cost: CachedCost, cached: bool) -> OpCost:
    return OpCost(source="measured", median_seconds=cost.median_s, spread_seconds=cost.spread_s,
                  repeats=cost.repeats, workspace_bytes=cost.workspace_bytes, cached=cached)


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
) -> Profile:
    """Measure every op of `graph` on every device in `devices` ("cpu", "cuda:N").

    `inputs` gives values for graph inputs by name (the rest are generated); `cache` is
    "default" (the user's cache file), a path, an open ProfileCache, or None for no caching;
    `progress` receives ProgressEvents; `rooflines` (device -> Roofline) configures the
    analytical fallback instead of measuring it; `time_limit_s` stops the measuring of ops
    (those left get the analytical fallback, labelled "estimated").
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
        entries = _measure_all(graph, targets, machine, store, given, threads, policy, report,
                               deadline)
        stats, profiles = entries
        if any(_missing(p, targets) for p in profiles):
            roofs = _rooflines(targets, machine, store, threads, rooflines or {})
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
    report("done", 1, 1, f"{len(graph.ops)} ops on {', '.join(profile.devices)} in "
           f"{profile.total_seconds:.1f}s ({stats['hits']} cache hits, {stats['misses']} "
           f"measured{unmeasured})", stats["hits"])
    return profile


def _measure_all(graph: Graph, targets: list[Device], machine: MachineInfo,
                 store: ProfileCache | None, given: dict[str, np.ndarray] | None, threads: int,
                 policy: TimingPolicy, report: Callable[..., None], deadline: float | None,
                 ) -> tuple[dict[str, int], list[OpProfile]]:
    """The cached and newly measured costs of every (op, device), and the counts of cache hits,
    measurements, signatures measured once for several ops and ops left unmeasured (out of
    time: no entry for that device)."""
    signatures = [op_signature(graph, op) for op in graph.ops]
    fingerprints = {d.name: device_fingerprint(machine, d) for d in targets}
    profiles = [OpProfile(op_id=op.id, name=op.name, op_type=op.op_type) for op in graph.ops]
    total = len(graph.ops) * len(targets)
    hits = misses = deduplicated = unmeasured = 0
    pending: list[tuple[Op, Device, CacheKey]] = []

    def record(op: Op, device: Device, cost: CachedCost, cached: bool) -> None:
        entry = profiles[op.id]
        if cost.supported:
            entry.costs[device.name] = _to_cost(cost, cached)
        else:
            entry.unsupported[device.name] = cost.reason

    for op in graph.ops:
        for device in targets:
            key = CacheKey(signatures[op.id], op.op_type, device.provider, threads,
                           ort.__version__, fingerprints[device.name],
                           kernel_clock(device, threads))
            found = store.get(key) if store is not None else None
            if found is None:
                pending.append((op, device, key))
            else:
                hits += 1
                record(op, device, found, cached=True)
    report("ops", hits, total, "cache lookups", hits)
    if pending and not _capture_fits(graph, threads, given is None, deadline):
        return {"hits": hits, "misses": 0, "deduplicated": 0, "unmeasured": len(pending)}, profiles
    if pending:
        report("capture", 0, 1, "running the whole graph once for real inputs")
        values = capture_values(graph, given, threads)
        report("capture", 1, 1)
        overheads = {d.name: run_overhead(d, threads, policy)
                     for d in {device for _, device, _ in pending}}
        memo: dict[tuple[str, str], CachedCost] = {}
        with tempfile.TemporaryDirectory(prefix="arenaplan-profile-") as scratch:
            for done, (op, device, key) in enumerate(pending, start=1):
                memo_key = (key.digest, device.name)
                if memo_key in memo:
                    deduplicated += 1
                    record(op, device, memo[memo_key], cached=False)
                elif deadline is not None and (time.perf_counter() + policy.max_seconds_per_op
                                               >= deadline):  # its timing could overrun
                    unmeasured += 1
                    continue
                else:
                    result = measure_op(graph, op, values, device, threads, policy,
                                        overheads[device.name], scratch)
                    misses += 1
                    if result.timing is None:
                        cost = CachedCost(False, reason=result.reason)
                    else:
                        cost = CachedCost(True, result.timing.median, result.timing.spread,
                                          result.timing.repeats, result.workspace_bytes)
                    memo[memo_key] = cost
                    if store is not None:
                        store.put(key, cost)
                    record(op, device, cost, cached=False)
                report("ops", hits + done, total, f"{op.op_type} {op.name} on {device.name}",
                       hits)
    return {"hits": hits, "misses": misses, "deduplicated": deduplicated,
            "unmeasured": unmeasured}, profiles


def _capture_fits(graph: Graph, threads: int, draw_inputs: bool, deadline: float | None
                  ) -> bool:
    """Whether the whole-graph run that captures every op's inputs, which cannot be stopped, is
    estimated to end before `deadline` (no deadline: it always fits)."""
    if deadline is None:
        return True
    cost = measurement_cost(graph, threads, draw_inputs)
    return time.perf_counter() + cost.total(1) <= deadline


def _missing(entry: OpProfile, targets: Sequence[Device]) -> list[str]:
    """The devices an op has neither a cost nor an unsupported reason for (not measured in
    time), or all of them for an op no device can run."""
    if not entry.costs:
        return [d.name for d in targets]
    return [d.name for d in targets
            if d.name not in entry.costs and d.name not in entry.unsupported]


def _rooflines(targets: list[Device], machine: MachineInfo, store: ProfileCache | None,
               threads: int, configured: Mapping[str, Roofline]) -> dict[str, Roofline]:
    roofs: dict[str, Roofline] = {}
    for device in targets:
        if device.name in configured:
            roofs[device.name] = configured[device.name].model_copy(update={"source": "configured"})
            continue
        key = estimate.roofline_cache_key(device_fingerprint(machine, device), device.provider,
                                          threads)
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
