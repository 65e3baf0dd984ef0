"""Plans with recomputations and cross-device copies for the report tests, from explicit schedules.

The report's quick tests use plans built from hand-made schedules (planner.memory.schedule events
through planner.plan.builder, validated like any plan): they take seconds where the remat solver
takes minutes, and they copy between devices, which the solver's one-device plans do not. The
solver's own plan is checked in tests/planner/report/test_report_solver_plan.py (slow).
Both moves act on a value's longest idle interval in file order (between two consecutive uses,
its making counting as a use):

- recompute: the op's outputs are freed at the start of the interval and the op runs again
  (`recompute=True`) right before its end; ops are picked greedily, in file order, when that
  lowers the peak of live bytes;
- offload: the value is copied to a second device at the start of the interval, freed at home,
  and copied back right before its end.

Every value is freed right after its last read, except state, constants and graph outputs on
their home device, as in `planner.memory.schedule.sequential_schedule`.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from planner.ir.graph import Graph, Region, load_graph
from planner.memory.schedule import (
    Compute,
    Copy,
    Event,
    Free,
    Schedule,
    free_after_last_read,
    home_on,
)
from planner.memory.zones import outlives_step
from planner.plan.builder import build_plan
from planner.profile.estimate import op_bytes, op_flops
from schemas.plan import Plan, PlanRequest, SolverReport
from tests.support.fixture_zoo import model_path

HOME = "cpu"
SECOND = "cpu:1"
# A made-up roofline for predicted times: the report shows them, nothing here measures them.
FLOPS_PER_S = 2e10
BYTES_PER_S = 1e10


def _idle_interval(graph: Graph, tensors: Sequence[int]) -> tuple[int, int]:
    """(op before, op after) the longest stretch of file order in which `tensors` (outputs of one
    op) are neither made nor read; (-1, -1) when there is none."""
    uses = sorted({graph.tensors[tensors[0]].producer,
                   *(c for t in tensors for c in graph.tensors[t].consumers)})
    gaps = [(b - a, a, b) for a, b in zip(uses, uses[1:], strict=False) if b - a > 1]
    if not gaps:
        return -1, -1
    _, before, after = max(gaps, key=lambda g: (g[0], -g[1]))
    return before, after


def policy_schedule(graph: Graph, recompute: Sequence[int] = (), offload: Sequence[int] = (),
                    device: str = HOME, second: str = SECOND) -> Schedule:
    """Every op once in file order, plus the recomputations and offload round trips asked for."""
    timed: list[tuple[tuple[float, int], Event]] = [
        ((float(op.id), 0), Compute(op.id, device)) for op in graph.ops
    ]
    for p in recompute:
        _, after = _idle_interval(graph, graph.ops[p].output_ids)
        timed.append(((after - 0.5, p), Compute(p, device, recompute=True)))
    for t in offload:
        before, after = _idle_interval(graph, [t])
        timed.append(((before + 0.25, t), Copy(t, device, second)))
        timed.append(((after - 0.75, t), Copy(t, second, device)))
    timed.sort(key=lambda item: item[0])
    home = home_on(graph, device)
    events = free_after_last_read(graph, [event for _, event in timed], home)
    return Schedule(events=tuple(events), home=home)


def peak_live_bytes(graph: Graph, schedule: Schedule, device: str = HOME) -> int:
    live = sum(graph.tensors[t].nbytes for t, d in schedule.home.items()
               if d == device and graph.tensors[t].producer is None)
    peak = live
    for e in schedule.events:
        if isinstance(e, Compute) and e.device == device:
            live += sum(graph.tensors[t].nbytes for t in graph.ops[e.op].output_ids)
        elif isinstance(e, Copy) and e.dst == device:
            live += graph.tensors[e.tensor].nbytes
        elif isinstance(e, Free) and e.device == device:
            live -= graph.tensors[e.tensor].nbytes
        peak = max(peak, live)
    return peak


def _movable(graph: Graph, op_id: int) -> bool:
    """A forward op whose outputs are not state or graph outputs and sit idle for a while."""
    op = graph.ops[op_id]
    return (op.region is Region.FORWARD and not set(op.output_ids) & outlives_step(graph)
            and _idle_interval(graph, op.output_ids)[0] >= 0)


def greedy_recompute(graph: Graph) -> list[int]:
    """Forward ops (file order) whose recomputation lowers the peak of live bytes."""
    chosen: list[int] = []
    best = peak_live_bytes(graph, policy_schedule(graph))
    for op in graph.ops:
        if not _movable(graph, op.id):
            continue
        peak = peak_live_bytes(graph, policy_schedule(graph, [*chosen, op.id]))
        if peak < best:
            chosen.append(op.id)
            best = peak
    return chosen


def greedy_offload(graph: Graph, recompute: Sequence[int], limit: int) -> list[int]:
    """Up to `limit` forward values, idle longest first (bytes x steps), whose round trip to the
    second device lowers the home device's peak on top of `recompute`."""
    recomputed = set(recompute)

    def idle_bytes(t: int) -> int:
        before, after = _idle_interval(graph, [t])
        return graph.tensors[t].nbytes * (after - before)

    candidates = sorted(
        (t for op in graph.ops if op.id not in recomputed and _movable(graph, op.id)
         for t in op.output_ids[:1]),
        key=lambda t: (-idle_bytes(t), t),
    )
    chosen: list[int] = []
    best = peak_live_bytes(graph, policy_schedule(graph, recompute))
    for t in candidates:
        if len(chosen) == limit:
            break
        peak = peak_live_bytes(graph, policy_schedule(graph, recompute, [*chosen, t]))
        if peak < best:
            chosen.append(t)
            best = peak
    return chosen


def _op_seconds(graph: Graph, op_id: int) -> float:
    op = graph.ops[op_id]
    return max(op_flops(graph, op) / FLOPS_PER_S, op_bytes(graph, op) / BYTES_PER_S)


@lru_cache(maxsize=4)
def remat_plan(name: str = "unet_small", offloads: int = 4) -> tuple[Graph, Plan]:
    """A valid plan of fixture `name` that recomputes greedily chosen forward ops on `cpu` and
    offloads up to `offloads` greedily chosen forward values to `cpu:1` (none: one device)."""
    graph = load_graph(model_path(name))
    keep_everything = policy_schedule(graph)
    recompute = greedy_recompute(graph)
    offload = greedy_offload(graph, recompute, offloads)
    schedule = policy_schedule(graph, recompute, offload)
    devices = [HOME, SECOND] if offload else [HOME]

    base_seconds = sum(_op_seconds(graph, op.id) for op in graph.ops)
    seconds = sum(_op_seconds(graph, e.op) for e in schedule.events if isinstance(e, Compute))
    seconds += sum(graph.tensors[e.tensor].nbytes / BYTES_PER_S
                   for e in schedule.events if isinstance(e, Copy))
    keep_peak = peak_live_bytes(graph, keep_everything)
    peak = peak_live_bytes(graph, schedule)
    solvers = [
        SolverReport(phase="order", method="file order", status="FEASIBLE",
                     objective=keep_peak, bound=None, baseline=keep_peak, seconds=0.0),
        SolverReport(phase="remat", method="greedy test policy (explicit schedule)",
                     status="FEASIBLE", objective=seconds, baseline=base_seconds,
                     seconds=0.0, notes=[f"peak live bytes {peak} (keep-everything "
                                         f"{keep_peak})"]),
    ]
    provisional = PlanRequest(budgets={d: 2**40 for d in devices}, time_limit_s=5)
    built = build_plan(graph, schedule, provisional, plan_id=f"report-test-{name}",
                       planner_version="report-test", solvers=solvers,
                       predicted_seconds=seconds, layout_time_limit=1.0)
    plan = built.plan
    # Budgets the plan fits, as a remat solver would be asked for: 70% of the keep-everything
    # peak at home (or the arena when that is more), a quarter over the arena on the second
    # device.
    budgets = {}
    for d in plan.devices:
        wanted = int(0.7 * keep_peak) if d.device == HOME else int(1.25 * d.arena_bytes)
        budgets[d.device] = max(wanted, d.arena_bytes)
    request = provisional.model_copy(update={"budgets": budgets})
    plan = plan.model_copy(update={
        "request": request,
        "devices": [d.model_copy(update={"budget_bytes": budgets[d.device]})
                    for d in plan.devices],
    })
    return graph, plan
