"""The last answers of a request no plan was found for: the smallest plan the heuristics make,
and when even that exceeds the budget, what budget to ask for instead.

Below the op-footprint bound (planner.memory.liveness.order_lower_bound) no plan exists, and the
error says so with that proven bound. Otherwise the refusal names the smallest budget this
planner is known to meet: the arena of the smallest plan (`smallest_plan`: the eviction
simulation's targets bisected between the op-footprint bound and the keep-everything peak, the
heuristics' schedule at the least peak it reached, laid out), else the keep-everything arena;
and whether the remat model proved the budget impossible for the order or only found nothing in
the time.

The bisection depends on the graph, the order and the costs, not on the budget asked: a request
for the budget a refusal named finds that plan again when its own search finds nothing that lays
out within it (ResNet-18 at its op-footprint bound was refused naming 112,958,592 B; asked for
that, the search's faster schedules laid out 0.4% over it and the request was refused again,
naming 113,529,088 B; now it gets a plan of exactly that arena).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import NoReturn

from planner.errors import InfeasibleError
from planner.ir.graph import Graph
from planner.memory.liveness import order_lower_bound
from planner.order import OrderResult
from planner.plan.builder import BuiltPlan, build_plan
from planner.profile.costs import CostTable
from planner.remat.evict import evict_candidates
from planner.remat.heuristics import Candidate
from planner.remat.rematerialize import RematResult, eviction_result, plan_remat
from planner.remat.report import order_report_beside, remat_report
from planner.version import PLANNER_VERSION
from schemas.plan import PlanRequest

# smallest_plan's time: the eviction bisection, the heuristics at the least peak it reached,
# the layout.
SMALLEST_SHARES = (0.6, 0.25, 0.15)
# The eviction targets smallest_plan's bisection tries at most (each probe halves the interval).
SMALLEST_PROBES = 5


def check_above_lower_bound(graph: Graph, request: PlanRequest) -> None:
    """Raise when a single budget is below what some step needs whatever the plan."""
    if len(request.budgets) != 1:
        return
    device, budget = next(iter(request.budgets.items()))
    lower = order_lower_bound(graph)
    if budget < lower:
        raise InfeasibleError(
            f"{device}: no plan fits {budget} B: some step needs {lower} B "
            f"live at once whatever the order or recomputation (state, constants and one op's "
            f"inputs and outputs); ask for at least {lower} B",
            smallest_feasible=lower, is_lower_bound=True,
        )


def smallest_plan(graph: Graph, request: PlanRequest, order: OrderResult, costs: CostTable,
                  plan_id: str, time_limit: float, other_orders: Sequence[Sequence[int]] = ()
                  ) -> BuiltPlan | None:
    """The plan of the heuristic schedule with the least peak on the request's one device: the
    eviction schedule of least peak (_least_eviction), or a faster one the heuristics aimed at
    its peak find; laid out for the request's budget (the arena may exceed it) with reports
    whose bound and status hold for that budget. None when no schedule is found in `time_limit`
    (shared SMALLEST_SHARES)."""
    (device, budget), = request.budgets.items()
    evict_share, heuristics_share, layout_share = SMALLEST_SHARES
    least, peak = _least_eviction(graph, [order.order, *other_orders], device,
                                  order.peak_bytes, costs, request.alignment,
                                  evict_share * time_limit)
    if peak is None:
        return None
    result = plan_remat(graph, order.order, {device: peak}, costs,
                        time_limit=heuristics_share * time_limit,
                        memory_unit=request.alignment, use_solver=False,
                        other_orders=other_orders, bound_budgets={device: max(budget, peak)})
    if result.best is None and least is not None:
        result = eviction_result(graph, [least], device, costs)
    if result.best is None:
        return None
    return build_plan(
        graph, result.best.schedule, request, plan_id=plan_id,
        planner_version=PLANNER_VERSION,
        solvers=(order_report_beside(order.report(), result.best.stats.recomputes),
                 remat_report(result)),
        predicted_seconds=result.objective_seconds,
        layout_time_limit=layout_share * time_limit)


def _least_eviction(graph: Graph, orders: Sequence[Sequence[int]], device: str,
                    keep_all_peak: int, costs: CostTable, alignment: int, time_limit: float
                    ) -> tuple[Candidate | None, int | None]:
    """The eviction simulation's replayed schedule of least peak that fits the target it was
    aimed at, and the least peak replayed (within its target or not), found by bisecting the
    target between the op-footprint bound and the keep-everything peak of the order: a target
    within which some run's replay fits lowers the top to that replay's peak, one without
    raises the bottom. Aimed too low, eviction ends far above what it reaches aimed higher
    (ResNet-CIFAR: 3,350,400 B aimed at its bound or at persistent + 30% of its activations,
    2,863,232 B aimed at 2,962,271 B; the 20,000-op chain: 44,709 B aimed at its bound, within
    20,000 B aimed at 20,000 B). The targets depend on the graph, the orders and the costs, not
    on the budget asked: a request for the budget a refusal named probes them again (see the
    module doc). Up to SMALLEST_PROBES targets in `time_limit` (the first run always
    completes)."""
    started = time.perf_counter()
    low, high = order_lower_bound(graph), keep_all_peak
    least: Candidate | None = None
    seen: list[int] = []
    for k in range(SMALLEST_PROBES):
        left = (time_limit - (time.perf_counter() - started)) / (SMALLEST_PROBES - k)
        if low >= high or (k and left <= 0):
            break
        target = (low + high) // 2
        reached = evict_candidates(graph, orders, device, target, costs, alignment=alignment,
                                   deadline=time.perf_counter() + max(0.0, left))
        seen += [] if reached.smallest_peak is None else [reached.smallest_peak]
        fitting = min(reached.fitting, key=lambda c: c.stats.peaks[device], default=None)
        if fitting is None:
            low = target + 1
        else:
            least, high = fitting, fitting.stats.peaks[device]
    return least, min(seen, default=None)


def raise_infeasible(graph: Graph, request: PlanRequest, result: RematResult | None,
                     smallest: BuiltPlan | None, keep_all_arena: Callable[[], int] | None,
                     fragmented: dict[str, int] | None = None) -> NoReturn:
    """No plan within the budgets: say what to ask for. Proven infeasibility says so (the exact
    model's verdict); otherwise the smallest budget this planner is known to meet: the arena of
    `smallest` (smallest_plan), else of keeping everything (`keep_all_arena`). `fragmented`:
    the bytes by which the arenas of the schedules found exceeded the budgets (when the search
    found schedules within the budgets that did not lay out within them)."""
    lower = order_lower_bound(graph)
    if fragmented:
        verdict = ("the arenas of the best plans found exceed the budgets (fragmentation): "
                   + ", ".join(f"{d} by {e} B" for d, e in fragmented.items()))
    elif result is not None and result.status == "INFEASIBLE":
        verdict = "proven infeasible for the fixed order"
    else:
        verdict = f"none found in {request.time_limit_s:g} s, not proven impossible"
    known = [] if smallest is None else [smallest.plan.devices[0].arena_bytes]
    if keep_all_arena is not None:
        known.append(keep_all_arena())
    home = next(iter(request.budgets))
    if known:
        achieved = min(known)
        raise InfeasibleError(
            f"no plan within {dict(request.budgets)} B ({verdict}); the smallest budget this "
            f"planner meets on {home} is {achieved} B (no plan can go below {lower} B); ask for "
            f"at least {achieved} B, or allow more time",
            smallest_feasible=achieved,
        )
    if fragmented:
        raise InfeasibleError(
            f"no plan within {dict(request.budgets)} B ({verdict}); ask for "
            + ", ".join(f"{d}={request.budgets[d] + e} B" for d, e in fragmented.items()),
            smallest_feasible=max(request.budgets[d] + e for d, e in fragmented.items()),
        )
    raise InfeasibleError(
        f"no plan within {dict(request.budgets)} B ({verdict}); no plan can go below {lower} B "
        f"on one device; ask for more than {lower} B and allow more time",
        smallest_feasible=lower, is_lower_bound=True,
    )
