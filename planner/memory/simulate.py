"""Live bytes per device and predicted time of a Schedule, before any plan is built.

Solvers and baselines use it to check a schedule against a budget cheaply. It counts memory as
the plan builder will (both take their materializations and live ranges from
planner.memory.replay); the plan validator stays the independent judge of a plan.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.ir.graph import Graph
from planner.memory.replay import replay
from planner.memory.schedule import Compute, Copy, Schedule
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
    """The schedule replayed: its peaks, and its time with each compute priced as it runs,
    at the op's in-place time where its output shares an input's storage (CostTable)."""
    walked = replay(graph, schedule)
    computes = recomputes = copies = 0
    seconds = 0.0
    for e, io in zip(schedule.events, walked.events, strict=True):
        # summed in event order: ties between schedules compare exactly
        if isinstance(e, Compute):
            computes += 1
            recomputes += e.recompute
            if costs is not None:
                first = next((w for w in io.writes if w is not None), None)
                seconds += costs.run_seconds(e.op, e.device,
                                             first is not None and first.shares is not None)
        elif isinstance(e, Copy):
            copies += 1
            if costs is not None:
                seconds += costs.copy_seconds(e.src, e.dst, graph.tensors[e.tensor].nbytes)
    return ScheduleStats(
        peaks=walked.peaks(alignment),
        seconds=None if costs is None else seconds,
        computes=computes,
        recomputes=recomputes,
        copies=copies,
    )
