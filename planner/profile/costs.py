"""Costs the rematerialization / placement solvers optimize: op times per device, copy times.

XEngine's objective (eq. 1) needs c[d, i], the time of operator i on device d, and w[e, d, d'],
the time to copy tensor e from device d to device d'. `CostTable` holds both, read from a
`schemas.profile.Profile` (per-op medians; copies from the profile's least-squares fits
`latency + nbytes / bandwidth`), or given explicitly (tests, graph-json benchmarks). An op with no
cost on a device cannot run there; every op must be able to run on at least one device.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from planner.errors import InvalidInputError
from planner.ir.graph import Graph
from schemas.profile import Profile


@dataclass(frozen=True)
class CopyLine:
    """Copy time `latency + nbytes / bytes_per_second` from one device to another."""

    latency: float
    bytes_per_second: float

    def seconds(self, nbytes: int) -> float:
        return 0.0 if nbytes <= 0 else self.latency + nbytes / self.bytes_per_second


@dataclass(frozen=True)
class CostTable:
    """Per op (by id): device -> seconds (a device missing: the op cannot run there).

    `in_place_seconds` (per op by id, or empty): device -> seconds of a run whose output is
    written over the input it shares (a view's source, an in-place candidate), where the profile
    measured that apart. A kernel then skips copying that input into its output (a view, a
    scatter's data, a Gemm's addend) or writes lines it has just read: GPT-2-small's 154 MB
    embedding scatter takes 16 ms out of place and 0.3 ms in place, a 16 MB Mul 1.8 ms and
    1.2 ms. The solvers weigh schedules by `op_seconds`; a replayed schedule is timed with the
    in-place figure wherever the replay shares storage (planner.memory.simulate), and every
    lower bound uses `least_seconds`, so that it holds for either.
    """

    devices: tuple[str, ...]
    op_seconds: tuple[Mapping[str, float], ...]
    copies: Mapping[tuple[str, str], CopyLine] = field(default_factory=dict)
    in_place_seconds: tuple[Mapping[str, float], ...] = ()

    def run_seconds(self, op: int, device: str, shared: bool) -> float:
        """One run of `op` on `device`; `shared`: its output sits in an input's storage."""
        if shared and self.in_place_seconds:
            return self.in_place_seconds[op].get(device, self.op_seconds[op][device])
        return self.op_seconds[op][device]

    def least_seconds(self, op: int, device: str) -> float:
        """The least time one run of `op` on `device` may take, sharing storage or not."""
        return min(self.run_seconds(op, device, False), self.run_seconds(op, device, True))

    def copy_seconds(self, src: str, dst: str, nbytes: int) -> float:
        if src == dst:
            return 0.0
        line = self.copies.get((src, dst))
        if line is None:
            raise InvalidInputError(
                f"no copy cost from {src} to {dst}; profile both devices (arenaplan profile "
                f"--device {src} --device {dst})"
            )
        return line.seconds(nbytes)

    def sequential_seconds(self, device: str) -> float | None:
        """Every op once on `device` (None when some op cannot run there)."""
        total = 0.0
        for costs in self.op_seconds:
            if device not in costs:
                return None
            total += costs[device]
        return total

    def fastest_seconds(self) -> float:
        """Every op once on its fastest device: a lower bound on any schedule's compute time."""
        return sum(min(self.least_seconds(op, d) for d in costs)
                   for op, costs in enumerate(self.op_seconds))


# Host-to-host copies between `cpu` and an extra host arena `cpu:N` when the profile has no fit
# for them: a plain memcpy, assumed 10 GB/s after 1 microsecond.
HOST_COPY = CopyLine(1e-6, 10e9)


def measured_as(device: str) -> str:
    """The profiled device whose costs `device` uses: an extra host arena `cpu:N` runs on the
    CPU and shares its costs (schemas.plan)."""
    return "cpu" if device.startswith("cpu") else device


def costs_from_profile(profile: Profile, graph: Graph, devices: Sequence[str]) -> CostTable:
    """The profile's medians for `devices`; raises InvalidInputError when it lacks one of them.
    `cpu:N` uses the `cpu` costs, and copies between host arenas default to HOST_COPY."""
    if len(profile.ops) != len(graph.ops):
        raise InvalidInputError(
            f"the profile has {len(profile.ops)} ops but the model has {len(graph.ops)}; profile "
            "this model with `arenaplan profile`"
        )
    missing = sorted({measured_as(d) for d in devices} - set(profile.devices))
    if missing:
        raise InvalidInputError(
            f"the profile has no costs for {', '.join(missing)} (it covers "
            f"{', '.join(profile.devices)}); profile with --device for every budgeted device"
        )
    by_id = {entry.op_id: entry for entry in profile.ops}
    op_seconds = []
    in_place = []
    for op in graph.ops:
        entry = by_id.get(op.id)
        measured = {d: entry.costs[measured_as(d)] for d in devices
                    if entry is not None and measured_as(d) in entry.costs}
        costs = {d: cost.median_seconds for d, cost in measured.items()}
        in_place.append({d: cost.in_place_seconds for d, cost in measured.items()
                         if cost.in_place_seconds is not None})
        if not costs:
            raise InvalidInputError(
                f"op {op.name} ({op.op_type}) has no cost on any of {', '.join(devices)} in the "
                "profile, so it cannot be scheduled"
            )
        op_seconds.append(costs)
    copies = {}
    for fit in profile.copies:
        if fit.src in devices and fit.dst in devices:
            copies[(fit.src, fit.dst)] = CopyLine(fit.latency_seconds, fit.bytes_per_second)
    for src in devices:
        for dst in devices:
            if src == dst or (src, dst) in copies:
                continue
            if src.startswith("cpu") and dst.startswith("cpu"):
                copies[(src, dst)] = HOST_COPY
            else:
                raise InvalidInputError(
                    f"the profile has no copy cost from {src} to {dst}; profile with --device "
                    f"{src} --device {dst}"
                )
    return CostTable(devices=tuple(devices), op_seconds=tuple(op_seconds), copies=copies,
                     in_place_seconds=tuple(in_place) if any(in_place) else ())
