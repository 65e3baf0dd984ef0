"""The least peak the remat search reaches on one device: a bisection of the budget it aims at.

Aimed too low, the searches end far above what they reach aimed higher: ResNet-CIFAR's eviction runs
replay no lower than 3,350,400 B aimed at its op-footprint bound or at persistent + 30% of its
activations (2,290,358 B), and 2,863,232 B aimed at 2,962,271 B. So the smallest budget the planner
names (planner.pipeline.infeasible: a refusal's answer; planner.queries.min_budget) comes from a
bisection between a lower and an upper budget: each probe runs the eviction simulation, then
plan_remat without a solver (the stage heuristics) aimed inside the interval (_probe; least_peak
chooses where); one that finds schedules within it lowers the top to the least peak among them, one
that does not raises the bottom. The schedule of that least peak is kept: a budget named from a peak
some run replayed without fitting its target cannot be met by aiming at it (GPT-2-tiny: 484,416 B
replayed, and the heuristics aimed there found nothing). A heuristic answer, not a proof: a failed
probe only means the search found nothing there.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from planner.ir.graph import Graph
from planner.profile.costs import CostTable
from planner.remat.evict import evict_candidates
from planner.remat.heuristics import Candidate
from planner.remat.rematerialize import plan_remat
from planner.remat.remembered import remember_schedule, remembered_schedule

# Probes at most (each halves the interval at least), and the interval (a share of its top)
# below which bisecting stops.
PROBES = 5
TOLERANCE = 0.01
# The share of a probe's time the eviction simulation has before the stage heuristics (_probe).
EVICTION_SHARE = 0.5


@dataclass(frozen=True)
class LeastPeak:
    """The bisection's answer: the replayed schedule of least peak found within the budget it
    was aimed at (None when no probe found one), and the budget it ends at: that schedule's
    peak, else the upper budget it started from. `replayed`: the least peak any run replayed,
    within its target or not (None when none did); a search given more time, with a solver,
    may meet it (GPT-2-tiny: min-budget's full plan at 484,416 B, where the bisection's
    schedules ended at 492,608-498,240 B)."""

    schedule: Candidate | None
    budget: int
    replayed: int | None


def least_peak(graph: Graph, order: Sequence[int], device: str, costs: CostTable, lower: int,
               upper: int, *, memory_unit: int, time_limit: float,
               other_orders: Sequence[Sequence[int]] = (), seen: Sequence[int] = ()
               ) -> LeastPeak:
    """See the module doc: up to PROBES probes on [lower, upper] in `time_limit` seconds, each given
    an equal share of the time left. A probe aims, once each, at the least peak a run replayed that
    lies inside the interval (a probe aimed at a peak may replay just above it: the next aims
    there) (UNet-small at persistent + 30% of its activations: 477,824-485,952
    B named, 485,952-486,144 B with the middle alone); else, after a probe that fitted, a quarter of
    the interval below its top, else at its middle. Aimed far below what it can reach, a probe finds
    nothing and spends its whole share; aimed near it, it fits in half that (ResNet-CIFAR, 10 s:
    from 3,359,552 B the middle, 2,522,558 B, found nothing in 1.8 s, and the refusal named
    2,957,312 B here and 3,359,552 B on a slower machine; the quarter step fitted at 2,835,776 B in
    0.9 s and it named 2,835,776-2,863,232 B). It starts from the schedule of least peak an earlier
    bisection of the graph kept (planner.remat.remembered), below `upper`, and keeps a lower one
    it finds. Without one, the first probe always completes (given any time at all); the others
    start only while
    the time left covers the last one's (a probe's first eviction run completes whatever its share:
    on the 20,000-op chain each took 2 s of a 0.2-0.6 s share). `seen`: peaks that earlier runs
    replayed (the request's own remat search), aimed at like the probes' own: UNet-small's search
    at persistent + 30% of its activations replayed 477,120 B, and a bisection that started
    without it aimed at 830,238 B, then 502,899 B, and ended at 542,656 B."""
    started = time.perf_counter()
    low, high = lower, upper
    least = remembered_schedule(graph, device, costs, memory_unit)
    if least is not None and least.stats.peaks[device] < upper:
        high = least.stats.peaks[device]
    else:
        least = None
    kept = least
    replayed: list[int] = list(seen)
    last = 0.0  # seconds the last probe took
    tried: set[int] = set()
    fitted = least is not None
    for k in range(PROBES):
        remaining = time_limit - (time.perf_counter() - started)
        if high - low <= TOLERANCE * high or (
                (k or kept is not None or time_limit <= 0) and remaining < max(last, 1e-9)):
            break
        aims = [peak for peak in replayed if low < peak < high and peak not in tried]
        if aims:
            middle = min(aims)
        elif fitted:
            middle = high - (high - low) // 4
        else:
            middle = (low + high) // 2
        tried.add(middle)
        probe_started = time.perf_counter()
        found, smallest = _probe(graph, [order, *other_orders], device, costs, middle,
                                 memory_unit, probe_started + max(0.0, remaining) / (PROBES - k))
        last = time.perf_counter() - probe_started
        replayed += [] if smallest is None else [smallest]
        fitted = bool(found)
        if not found:
            low = middle + 1
            continue
        least = min(found, key=lambda c: c.stats.peaks[device])
        high = least.stats.peaks[device]
    if least is not None and least is not kept:
        remember_schedule(graph, device, memory_unit, least)
    return LeastPeak(least, high if least is not None else upper, min(replayed, default=None))


def _probe(graph: Graph, orders: Sequence[Sequence[int]], device: str, costs: CostTable,
           budget: int, memory_unit: int, deadline: float
           ) -> tuple[list[Candidate], int | None]:
    """The replayed schedules within `budget` of the eviction simulation given EVICTION_SHARE of
    the time to `deadline` (on graphs of hundreds of ops and more it reaches lower, sooner,
    than the stage heuristics: given plan_remat's share of eviction, ResNet-CIFAR's
    bisection in 8 s ended at 3,481,536 B, at 2,863,232 B with eviction first), else those
    of plan_remat without a solver when time is left (the stage heuristics reach lower on
    small graphs: the CNN's 189,952 B against eviction's 195,712 B); and the least peak
    their runs replayed, within `budget` or not."""
    started = time.perf_counter()
    evicted = evict_candidates(graph, orders, device, budget, costs, alignment=memory_unit,
                               deadline=started + EVICTION_SHARE * (deadline - started))
    if evicted.fitting or time.perf_counter() >= deadline:
        return evicted.fitting, evicted.smallest_peak
    probe = plan_remat(graph, orders[0], {device: budget}, costs, use_solver=False,
                       time_limit=max(0.0, deadline - time.perf_counter()),
                       memory_unit=memory_unit, other_orders=orders[1:])
    seen = [p for p in (evicted.smallest_peak, probe.smallest_peak_bytes) if p is not None]
    return ([c for c in (probe.best, *probe.alternatives) if c is not None],
            min(seen, default=None))
