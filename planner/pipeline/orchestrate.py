"""`plan_model` / `plan_graph`: the phases of planner.pipeline, in order, on one time budget.

`plan_model_costed` / `plan_graph_costed` also return the profile the planner measured itself
(for a request without one), so that a caller which keeps plans (the service) can keep the costs
a plan was made with beside it: the plan id covers the request, not a measurement made later.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from onnx import ModelProto

from planner.errors import InvalidInputError
from planner.ir.graph import Graph, load_graph
from planner.memory.replay import forget_last_replay
from planner.memory.schedule import sequential_schedule
from planner.order import OrderResult, optimize_order
from planner.pipeline.collector import fewer_collections
from planner.pipeline.fit import RematFit
from planner.pipeline.infeasible import check_above_lower_bound
from planner.plan.builder import BuiltPlan, build_plan
from planner.plan.validate import validate_plan
from planner.profile.costs import costs_from_profile
from planner.profile.for_request import carried_over, profile_for
from planner.profile.graph_workspace import with_graph_workspace
from planner.profile.workspace import with_workspace
from planner.time_budget import TimeBudget
from planner.version import PLANNER_VERSION
from schemas.plan import Plan, PlanRequest, compute_plan_id
from schemas.profile import Profile

ProgressCallback = Callable[[str, dict], None]

# With one device, ordering and the keep-everything layout get the larger shares of the time
# (planner.time_budget) when the quick order's peak is within this factor of the budget.
MAY_FIT = 0.9
# A budget this far above the order's live bytes leaves the layout room: its quick cap applies.
ROOMY_BUDGET = 0.01


class PlanValidationError(RuntimeError):
    """The planner produced a plan its own validator rejects: a bug, reported as such."""


@dataclass(frozen=True)
class Costed:
    """A plan, and the profile the planner measured for it when the request carried none.

    `measured_profile` is None when the request brought its own profile (the plan was made with
    that one) and when no costs were needed (keeping every value fit the one budget). Planning
    again with `request.profile = measured_profile` makes the same decisions on the same costs.
    """

    plan: Plan
    measured_profile: Profile | None


def plan_model(
    model: str | Path | bytes | ModelProto,
    request: PlanRequest,
    *,
    progress: ProgressCallback | None = None,
) -> Plan:
    return plan_model_costed(model, request, progress=progress).plan


def plan_model_costed(
    model: str | Path | bytes | ModelProto,
    request: PlanRequest,
    *,
    progress: ProgressCallback | None = None,
) -> Costed:
    started = time.perf_counter()  # loading (ONNX Runtime's rewrite) counts against the limit
    notify = progress or (lambda phase, info: None)
    notify("load", {})
    with fewer_collections():
        graph = load_graph(model, dims=request.dims, optimization=request.graph_optimization,
                           devices=list(request.budgets))

        def held() -> Graph:
            return load_graph(model, dims=request.dims, devices=list(request.budgets),
                              optimization=request.graph_optimization, late_recompute=False)

        late_copies = graph.optimized is not None and graph.optimized.late_recompute
        return plan_graph_costed(graph, request, progress=progress, started=started,
                                 held=held if late_copies else None)


def plan_graph(graph: Graph, request: PlanRequest, *,
               progress: ProgressCallback | None = None, started: float | None = None) -> Plan:
    return plan_graph_costed(graph, request, progress=progress, started=started).plan


def plan_graph_costed(graph: Graph, request: PlanRequest, *,
                      progress: ProgressCallback | None = None, started: float | None = None,
                      held: Callable[[], Graph] | None = None) -> Costed:
    """`started`: when the request's clock started (perf_counter), if before this call (the
    graph's loading counts against the limit too); now by default. `held`: the same graph
    without schemas.late_recompute's copies, planned instead when its keep-everything plan fits
    the one budget (the copies then cost time and save nothing the budget needs)."""
    try:
        with fewer_collections():
            return _plan_graph_costed(graph, request, progress,
                                      time.perf_counter() if started is None else started, held)
    finally:
        forget_last_replay()  # the request's walks are not kept beyond it


def _plan_graph_costed(graph: Graph, request: PlanRequest, progress: ProgressCallback | None,
                       started: float, held: Callable[[], Graph] | None) -> Costed:
    # the phases share the limit less what building and validating the plan will take
    clock = TimeBudget.for_graph(request.time_limit_s, len(graph.ops), len(graph.tensors),
                                 started=started)
    notify = progress or (lambda phase, info: None)
    _check_profile(graph, request)
    check_above_lower_bound(graph, request)
    devices = list(request.budgets)
    single = len(devices) == 1

    notify("order", {"ops": len(graph.ops)})
    quick = optimize_order(graph, use_solver=False, time_limit=clock.order(maybe_fits=False))
    budget = request.budgets[devices[0]] if single else None
    maybe_fits = budget is not None and budget >= MAY_FIT * quick.peak_bytes
    plan_id = compute_plan_id(graph.model_sha256, request, PLANNER_VERSION)
    if held is not None and budget is not None and budget >= quick.peak_bytes:
        kept = _keep_everything_if_it_fits(held(), request, plan_id, clock, notify)
        if kept is not None:
            return kept
    keep_all_arena: int | None = None
    # Ordering stops as soon as an order's peak is within the budget (keeping everything then
    # fits but for fragmentation); only when the layout still overshoots does it go on. Its
    # share counts the quick orders' time (GPT-2-small at 10 s: 1.0 s of them, then 0.6 s of
    # window re-ordering that found nothing, when the share was given again).
    order = optimize_order(graph, time_limit=max(0.0, clock.order(maybe_fits) - quick.seconds),
                           workers=request.workers, seed=request.seed, enough_bytes=budget,
                           start=quick)
    if budget is not None and order.peak_bytes <= budget:
        built = _keep_everything(graph, request, order, plan_id, clock, maybe_fits, notify)
        if built.plan.devices[0].arena_bytes > budget and order.stopped == "enough":
            order = optimize_order(graph, time_limit=clock.order(maybe_fits),
                                   workers=request.workers, seed=request.seed, start=order)
            built = _keep_everything(graph, request, order, plan_id, clock, maybe_fits, notify)
        keep_all_arena = built.plan.devices[0].arena_bytes
        if keep_all_arena <= budget:
            return Costed(_validated(graph, built.plan, request.profile, notify, clock), None)

    def keep_all() -> int:
        """The keep-everything arena, a budget known to work (laid out only when a refusal
        must name it: with the order's peak above the budget it cannot be the plan)."""
        if keep_all_arena is not None:
            return keep_all_arena
        built = _keep_everything(graph, request, order, plan_id, clock, False, notify)
        return built.plan.devices[0].arena_bytes

    profile = profile_for(graph, request, notify, time_limit_s=clock.profile())
    fit = RematFit(graph, request, order, costs_from_profile(profile, graph, devices), plan_id,
                   clock, keep_all if budget is not None else None,
                   other_orders=tuple(dict.fromkeys(
                       o for o in (quick.order, *quick.alternatives) if o != order.order)))
    plan = _validated(graph, fit.plan(notify).plan, profile, notify, clock)
    return Costed(plan, profile if request.profile is None else None)


def _keep_everything_if_it_fits(graph: Graph, request: PlanRequest, plan_id: str,
                                clock: TimeBudget, notify: ProgressCallback) -> Costed | None:
    """`graph`'s keep-everything plan on its quick order when it fits the one budget, else None
    (the caller then plans its own graph on the same clock: a refusal here costs the quick
    orders, and one layout when their peak fits). A profile the request carries (made for the
    graph the caller plans) prices it, carried over by op name; None when it lacks one of
    `graph`'s ops."""
    profile = None
    if request.profile is not None:
        profile = carried_over(request.profile, graph)
        if profile is None:
            return None
    budget = next(iter(request.budgets.values()))
    order = optimize_order(graph, use_solver=False, time_limit=clock.order(maybe_fits=False))
    if order.peak_bytes > budget:
        return None
    built = _keep_everything(graph, request, order, plan_id, clock, True, notify)
    if built.plan.devices[0].arena_bytes > budget:
        return None
    return Costed(_validated(graph, built.plan, profile, notify, clock), None)


def _keep_everything(graph: Graph, request: PlanRequest, order: OrderResult, plan_id: str,
                     clock: TimeBudget, maybe_fits: bool, notify: ProgressCallback) -> BuiltPlan:
    """The plan that runs `order` on the one device keeping every value until its last read."""
    device, budget = next(iter(request.budgets.items()))
    notify("layout", {"peak_live_bytes": order.peak_bytes})
    roomy = budget >= order.peak_bytes * (1 + ROOMY_BUDGET)
    return build_plan(
        graph, sequential_schedule(graph, order.order, device), request, plan_id=plan_id,
        planner_version=PLANNER_VERSION, solvers=(order.report(),),
        layout_time_limit=clock.keep_layout(maybe_fits, roomy=roomy),
    )


def _validated(graph: Graph, plan: Plan, profile: Profile | None, notify: ProgressCallback,
               clock: TimeBudget) -> Plan:
    if profile is not None:
        plan = with_workspace(graph, plan, profile)
    else:  # no op was measured: one whole-graph session measures the kernels' scratch
        notify("workspace", {"devices": [d.device for d in plan.devices]})
        plan = with_graph_workspace(graph, plan, time_limit_s=clock.left())
    notify("validate", {})
    report = validate_plan(graph, plan, profile)
    if not report.ok:
        raise PlanValidationError("; ".join(report.errors[:5]))
    if report.predicted_seconds is not None:
        plan = plan.model_copy(update={"predicted_seconds": report.predicted_seconds})
    notify("done", {"seconds": clock.elapsed()})
    return plan


def _check_profile(graph: Graph, request: PlanRequest) -> None:
    profile = request.profile
    if profile is not None and profile.model_sha256 != graph.model_sha256:
        raise InvalidInputError(
            "the profile was measured on another model (sha256 differs); profile this model "
            "with `arenaplan profile`"
        )
