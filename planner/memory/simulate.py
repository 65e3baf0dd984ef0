"""Replay a Schedule: live bytes per device and predicted time, before any plan is built.

The same memory model as the plan builder and the validator (each event is a step; a
materialization is live from the step that makes it, step 0 for preloaded ones, to its last read;
state, constants and final graph outputs on their home device to the end; an in-place update
shares its state's bytes when every read of the old value comes first). Solvers and baselines use
it to check a schedule against a budget cheaply; the validator stays the judge of a plan.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.ir.graph import Graph
from planner.memory.schedule import Compute, Copy, Free, Schedule
from planner.memory.sharing import state_updates
from planner.profile.costs import CostTable


@dataclass(frozen=True)
class ScheduleStats:
    peaks: dict[str, int]  # device -> bytes (each buffer rounded up to `alignment`)
    seconds: float | None
    computes: int
    recomputes: int
    copies: int

    def fits(self, budgets: dict[str, int]) -> bool:
        return all(self.peaks.get(d, 0) <= b for d, b in budgets.items())


def simulate(graph: Graph, schedule: Schedule, costs: CostTable | None = None,
             alignment: int = 1) -> ScheduleStats:
    updates = state_updates(graph)
    outlives = updates.persistent | {t.id for t in graph.tensors
                                     if t.is_initializer or t.is_graph_output}
    n = len(schedule.events)
    mats: list[list] = []  # [tensor, device, first, last, freed, preloaded, reads]
    current: dict[tuple[int, str], list] = {}

    def make(tensor: int, device: str, step: int, preloaded: bool = False) -> None:
        m = [tensor, device, step, step, False, preloaded, []]
        current[(tensor, device)] = m
        mats.append(m)

    for t, device in sorted(schedule.home.items()):
        if graph.tensors[t].producer is None:
            make(t, device, 0, preloaded=True)
    seconds = 0.0 if costs is not None else None
    computes = recomputes = copies = 0
    for step, event in enumerate(schedule.events):
        if isinstance(event, Compute):
            op = graph.ops[event.op]
            for t in op.input_ids:
                m = current[(t, event.device)]
                m[3] = max(m[3], step)
                m[6].append(step)
            for t in op.output_ids:
                make(t, event.device, step)
            computes += 1
            recomputes += event.recompute
            if seconds is not None:
                seconds += costs.op_seconds[event.op][event.device]
        elif isinstance(event, Copy):
            m = current[(event.tensor, event.src)]
            m[3] = max(m[3], step)
            m[6].append(step)
            make(event.tensor, event.dst, step)
            copies += 1
            if seconds is not None:
                seconds += costs.copy_seconds(event.src, event.dst,
                                              graph.tensors[event.tensor].nbytes)
        elif isinstance(event, Free):
            current.pop((event.tensor, event.device))[4] = True
    preloaded = {(m[0], m[1]): m for m in mats if m[5]}
    delta: dict[str, list[int]] = {}
    for m in mats:
        tensor, device, first, last, freed, was_preloaded, _ = m
        state = updates.in_place.get(tensor)
        old = preloaded.get((state, device)) if state is not None else None
        if old is not None and not old[4] and all(r <= first for r in old[6]):
            continue  # written over its state's storage
        if not freed and tensor in outlives and device == schedule.home.get(tensor):
            last = n - 1
        if was_preloaded and (tensor in updates.persistent or graph.tensors[tensor].is_initializer):
            first, last = 0, n - 1
        size = -(-max(graph.tensors[tensor].nbytes, 1) // alignment) * alignment
        curve = delta.setdefault(device, [0] * (n + 1))
        curve[first] += size
        curve[min(last, n - 1) + 1] -= size
    peaks = {}
    for device, curve in delta.items():
        running = best = 0
        for k in range(n):
            running += curve[k]
            best = max(best, running)
        peaks[device] = best
    return ScheduleStats(peaks, seconds, computes, recomputes, copies)
