"""The last answers of a request no plan was found for: the smallest plan the heuristics make,
and when even that exceeds the budget, what budget to ask for instead.

Below the op-footprint bound (planner.memory.liveness.order_lower_bound) no plan exists, and the
error says so with that proven bound. Otherwise the refusal names the smallest budget this
planner is known to meet: the arena of the smallest plan (`smallest_plan`: the schedule of
least peak the remat search reaches, planner.remat.smallest, laid out), else the keep-everything
arena; and whether the remat model proved the budget impossible for the order or only found
nothing in the time.

The bisection depends on the graph, the order and the costs, not on the budget asked: a request
for the budget a refusal named finds that plan again when its own search finds nothing that lays
out within it (ResNet-18 at its op-footprint bound was refused naming 112,958,592 B; asked for
that, the search's faster schedules laid out 0.4% over it and the request was refused again,
naming 113,529,088 B; now it gets a plan of exactly that arena).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NoReturn

from planner.errors import InfeasibleError
from planner.ir.graph import Graph
from planner.memory.liveness import lower_bound_reason, order_lower_bound
from planner.order import OrderResult
from planner.plan.builder import BuiltPlan, build_plan
from planner.profile.costs import CostTable
from planner.remat.rematerialize import RematResult, result_of
from planner.remat.remembered import remember_layout, remembered_layout
from planner.remat.report import order_report_beside, remat_report
from planner.remat.smallest import least_peak
from planner.version import PLANNER_VERSION
from schemas.plan import PlanRequest

# smallest_plan's time: the bisection of remat targets, the layout.
SMALLEST_SHARES = (0.8, 0.2)
# The layout's time when smallest_plan is given none (a request whose time is spent lays out a
# schedule kept from before, planner.remat.remembered): its first heuristic completes whatever.
SMALLEST_LAYOUT_AT_LEAST_S = 0.05
# A refusal that came before this share of the time limit ended because the searches did, not
# the time: it says so, and does not suggest more time (raise_infeasible).
RAN_OUT_SHARE = 0.8


def check_above_lower_bound(graph: Graph, request: PlanRequest) -> None:
    """Raise when a single budget is below what some step needs whatever the plan."""
    if len(request.budgets) != 1:
        return
    device, budget = next(iter(request.budgets.items()))
    lower = order_lower_bound(graph)
    if budget < lower:
        raise InfeasibleError(
            f"{device}: no plan fits {budget} B: some step needs {lower} B "
            f"live at once whatever the order or recomputation ({lower_bound_reason(graph)}); "
            f"ask for at least {lower} B",
            smallest_feasible=lower, is_lower_bound=True,
        )


def smallest_plan(graph: Graph, request: PlanRequest, order: OrderResult, costs: CostTable,
                  plan_id: str, time_limit: float, other_orders: Sequence[Sequence[int]] = (),
                  seen: Sequence[int] = ()) -> BuiltPlan | None:
    """The plan of the schedule of least peak the remat search reaches on the request's one
    device (planner.remat.smallest: its targets bisected between the op-footprint bound and the
    keep-everything peak of the order), laid out for the request's budget (the arena may exceed
    it) with reports whose bound and status hold for that budget. None when no schedule is
    found in `time_limit` (shared SMALLEST_SHARES; with none, only a schedule kept from an
    earlier request is laid out, planner.remat.remembered). A schedule kept with a layout gets
    that layout again, and a smaller layout of it is kept: the arena a refusal named is what a
    request for it gets. `seen`: peaks the request's search
    replayed, aimed at first (least_peak)."""
    (device, _), = request.budgets.items()
    search_share, layout_share = SMALLEST_SHARES
    found = least_peak(graph, order.order, device, costs, order_lower_bound(graph),
                       order.peak_bytes, memory_unit=request.alignment,
                       time_limit=search_share * time_limit, other_orders=other_orders,
                       seen=seen)
    if found.schedule is None:
        return None
    result = result_of(graph, [found.schedule], device, costs,
                       "the schedule of least peak the search reaches (planner.remat.smallest)")
    assert result.best is not None
    schedule, unit = result.best.schedule, request.alignment
    kept = remembered_layout(graph, device, unit, schedule)
    built = build_plan(
        graph, schedule, request, plan_id=plan_id,
        planner_version=PLANNER_VERSION,
        solvers=(order_report_beside(order.report(), result.best.stats.recomputes),
                 remat_report(result)),
        predicted_seconds=result.objective_seconds,
        layout_time_limit=max(SMALLEST_LAYOUT_AT_LEAST_S, layout_share * time_limit),
        known_offsets=None if kept is None else {device: kept})
    layout = built.layouts[device]
    remember_layout(graph, device, unit, schedule, layout.arena_size, layout.offsets)
    return built


def raise_infeasible(graph: Graph, request: PlanRequest, result: RematResult | None,
                     smallest: BuiltPlan | None, keep_all_arena: Callable[[], int] | None,
                     fragmented: dict[str, int] | None = None,
                     elapsed_s: float | None = None, out_of_time: bool = False) -> NoReturn:
    """No plan within the budgets: say what to ask for. Proven infeasibility says so (the exact
    model's verdict); otherwise the smallest budget this planner is known to meet: the arena of
    `smallest` (smallest_plan), else of keeping everything (`keep_all_arena`). `fragmented`:
    the bytes by which the arenas of the schedules found exceeded the budgets (when the search
    found schedules within the budgets that did not lay out within them). `elapsed_s`: the
    seconds the request ran; more time is suggested only when it used RAN_OUT_SHARE of its limit
    (or the time is not known, or `out_of_time`: the phases' share of the limit was spent, as
    when building and validating a plan of the graph would take most of it). UNet-small at
    persistent + 30% of its activations was refused after 32 s of 60 s ("none found in 60 s
    ... or allow more time"), every phase of its search having ended before its deadline."""
    lower = order_lower_bound(graph)
    limit = request.time_limit_s
    ran_out = out_of_time or elapsed_s is None or elapsed_s >= RAN_OUT_SHARE * limit
    if fragmented:
        verdict = ("the arenas of the best plans found exceed the budgets (fragmentation): "
                   + ", ".join(f"{d} by {e} B" for d, e in fragmented.items()))
    elif result is not None and result.status == "INFEASIBLE":
        verdict = "proven infeasible for the fixed order"
    elif ran_out:
        verdict = f"none found in {limit:g} s, not proven impossible"
    else:
        verdict = (f"none found, not proven impossible: the searches ended after "
                   f"{elapsed_s:.0f} s of the {limit:g} s allowed")
    more_time = ", or allow more time" if ran_out else ""
    known = [] if smallest is None else [smallest.plan.devices[0].arena_bytes]
    if keep_all_arena is not None:
        known.append(keep_all_arena())
    home = next(iter(request.budgets))
    if known:
        achieved = min(known)
        raise InfeasibleError(
            f"no plan within {dict(request.budgets)} B ({verdict}); the smallest budget this "
            f"planner meets on {home} is {achieved} B (no plan can go below {lower} B); ask for "
            f"at least {achieved} B{more_time}",
            smallest_feasible=achieved,
        )
    if fragmented:
        raise InfeasibleError(
            f"no plan within {dict(request.budgets)} B ({verdict}); ask for "
            + ", ".join(f"{d}={request.budgets[d] + e} B" for d, e in fragmented.items())
            + more_time,
            smallest_feasible=max(request.budgets[d] + e for d, e in fragmented.items()),
        )
    raise InfeasibleError(
        f"no plan within {dict(request.budgets)} B ({verdict}); no plan can go below {lower} B "
        f"on one device; ask for more than {lower} B"
        + (" and allow more time" if ran_out else ""),
        smallest_feasible=lower, is_lower_bound=True,
    )
