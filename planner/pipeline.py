"""The planner's one entry point: model bytes + PlanRequest -> a validated Plan.

Phases, each reported in `plan.solvers` with its status, bound, gap and time:
1. load and check the model (planner.graph), binding the request's dims;
2. order the ops to keep peak live bytes low (planner.order, OLLA's lifetime half);
3. turn the order into a schedule of compute / free events on the device;
4. lay out every device's buffers in one arena (planner.layout, OLLA's location half);
5. replay the plan independently (planner.validate); a plan that fails is a bug, never returned.

A budget below what the plan needs is refused with the arena size this planner achieves and the
live-bytes lower bound. Plans for several devices and plans below the no-recomputation minimum
need the rematerialization / placement solver, which is not part of this pipeline yet.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from onnx import ModelProto

from planner.errors import InfeasibleError, InvalidInputError
from planner.graph import Graph, load_graph
from planner.order import OrderResult, optimize_order
from planner.plan_builder import build_plan
from planner.schedule import sequential_schedule
from planner.validate import validate_plan
from planner.version import PLANNER_VERSION
from schemas.plan import Plan, PlanRequest, SolverReport, compute_plan_id

ProgressCallback = Callable[[str, dict], None]

# Share of the request's time limit given to ordering; layout gets the rest.
ORDER_TIME_SHARE = 0.5


class PlanValidationError(RuntimeError):
    """The planner produced a plan its own validator rejects: a bug, reported as such."""


def plan_model(
    model: str | Path | bytes | ModelProto,
    request: PlanRequest,
    *,
    progress: ProgressCallback | None = None,
) -> Plan:
    started = time.perf_counter()
    notify = progress or (lambda phase, info: None)
    notify("load", {})
    graph = load_graph(model, dims=request.dims)
    if len(request.budgets) != 1:
        raise InvalidInputError(
            "plans across several devices need the placement solver, which this planner "
            f"version ({PLANNER_VERSION}) does not have yet; give one budget"
        )
    device, budget = next(iter(request.budgets.items()))
    _check_profile(graph, request)

    notify("order", {"ops": len(graph.ops)})
    order = optimize_order(
        graph, time_limit=request.time_limit_s * ORDER_TIME_SHARE, workers=request.workers,
        seed=request.seed,
    )
    schedule = sequential_schedule(graph, order.order, device)
    notify("layout", {"peak_live_bytes": order.peak_bytes})
    remaining = max(1.0, request.time_limit_s - (time.perf_counter() - started))
    built = build_plan(
        graph, schedule, request,
        plan_id=compute_plan_id(graph.model_sha256, request, PLANNER_VERSION),
        planner_version=PLANNER_VERSION,
        solvers=[_order_report(order)],
        layout_time_limit=remaining,
    )
    plan = built.plan
    arena = plan.devices[0]
    if arena.arena_bytes > budget:
        raise InfeasibleError(
            f"{device}: this plan needs an arena of {arena.arena_bytes} B (its live bytes peak "
            f"at {arena.lower_bound_bytes} B) but the budget is {budget} B; ask for at least "
            f"{arena.arena_bytes} B (budgets below the no-recomputation minimum need "
            "rematerialization, not available in this planner version)",
            smallest_feasible=arena.arena_bytes,
        )
    notify("validate", {})
    report = validate_plan(graph, plan, request.profile)
    if not report.ok:
        raise PlanValidationError("; ".join(report.errors[:5]))
    if report.predicted_seconds is not None:
        plan = plan.model_copy(update={"predicted_seconds": report.predicted_seconds})
    notify("done", {"seconds": time.perf_counter() - started})
    return plan


def _check_profile(graph: Graph, request: PlanRequest) -> None:
    profile = request.profile
    if profile is not None and profile.model_sha256 != graph.model_sha256:
        raise InvalidInputError(
            "the profile was measured on another model (sha256 differs); profile this model "
            "with `arenaplan profile`"
        )


def _order_report(order: OrderResult) -> SolverReport:
    return SolverReport(
        phase="order", method=order.method, status=order.status,
        objective=order.peak_bytes, bound=order.lower_bound_bytes, gap=order.gap,
        baseline=order.file_order_peak_bytes, seconds=order.seconds, notes=list(order.notes),
    )
