"""The planner's one entry point: model bytes + PlanRequest -> a validated Plan.

Phases, each reported in `plan.solvers` with its status, bound, gap and time:
1. load and check the model (planner.ir.graph), binding the request's dims (`plan_graph` starts
   here for a graph built another way, e.g. planner.ir.graph_json);
2. order the ops to keep peak live bytes low (planner.order, OLLA's lifetime half);
3. with one device, keep everything in that order (free after last read) when its arena fits the
   budget; otherwise, or with two or more devices, rematerialization and placement
   (planner.remat, XEngine / Checkmate in CP-SAT): which op runs when and where, what is kept,
   copied, freed and recomputed, minimizing the predicted time from `request.profile` (else a
   CPU profile measured now with planner.profile; a `cuda:N` budget needs a supplied profile
   unless this machine has that GPU);
4. lay out every device's buffers in one arena (planner.layout, OLLA's location half); the remat
   solver bounds live bytes, so when fragmentation makes an arena exceed its budget the solve is
   repeated with that budget lowered by the excess (bounded retries);
5. replay the plan independently (planner.plan.validate); a plan that fails is a bug, never
   returned.

An infeasible request raises InfeasibleError naming the smallest budget this planner meets (or,
below the op-footprint bound no plan can beat, that proven lower bound).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from onnx import ModelProto

from planner.errors import InfeasibleError, InvalidInputError
from planner.ir.graph import Graph, load_graph
from planner.memory.liveness import order_lower_bound
from planner.memory.schedule import sequential_schedule
from planner.order import OrderResult, optimize_order
from planner.plan.builder import build_plan
from planner.plan.validate import validate_plan
from planner.version import PLANNER_VERSION
from schemas.plan import Plan, PlanRequest, SolverReport, compute_plan_id

ProgressCallback = Callable[[str, dict], None]

# Shares of the request's time limit. When keeping everything may fit, ordering gets
# ORDER_TIME_SHARE and the keep-everything layout KEEP_LAYOUT_SHARE, so that rematerialization
# keeps half the time when fragmentation pushes that arena just over the budget. When
# rematerialization is certainly needed ordering gets REMAT_ORDER_SHARE and the remat solver
# REMAT_SHARE of what is left.
ORDER_TIME_SHARE = 0.3
KEEP_LAYOUT_SHARE = 0.2
REMAT_ORDER_SHARE = 0.1
REMAT_SHARE = 0.8
LAYOUT_RETRIES = 3


class PlanValidationError(RuntimeError):
    """The planner produced a plan its own validator rejects: a bug, reported as such."""


def plan_model(
    model: str | Path | bytes | ModelProto,
    request: PlanRequest,
    *,
    progress: ProgressCallback | None = None,
) -> Plan:
    notify = progress or (lambda phase, info: None)
    notify("load", {})
    graph = load_graph(model, dims=request.dims)
    return plan_graph(graph, request, progress=progress)


def plan_graph(graph: Graph, request: PlanRequest, *,
               progress: ProgressCallback | None = None) -> Plan:
    started = time.perf_counter()
    notify = progress or (lambda phase, info: None)
    _check_profile(graph, request)
    devices = list(request.budgets)
    single = len(devices) == 1
    lower = order_lower_bound(graph)
    if single and request.budgets[devices[0]] < lower:
        device = devices[0]
        raise InfeasibleError(
            f"{device}: no plan fits {request.budgets[device]} B: some step needs {lower} B "
            f"live at once whatever the order or recomputation (state, constants and one op's "
            f"inputs and outputs); ask for at least {lower} B",
            smallest_feasible=lower, is_lower_bound=True,
        )

    notify("order", {"ops": len(graph.ops)})
    quick = optimize_order(graph, use_solver=False)
    maybe_fits = single and request.budgets[devices[0]] >= 0.9 * quick.peak_bytes
    share = ORDER_TIME_SHARE if maybe_fits else REMAT_ORDER_SHARE
    order = optimize_order(
        graph, time_limit=request.time_limit_s * share, workers=request.workers,
        seed=request.seed,
    )
    plan_id = compute_plan_id(graph.model_sha256, request, PLANNER_VERSION)
    keep_all_arena = None
    if single:
        device, budget = devices[0], request.budgets[devices[0]]
        notify("layout", {"peak_live_bytes": order.peak_bytes})
        remaining = max(1.0, request.time_limit_s - (time.perf_counter() - started))
        built = build_plan(
            graph, sequential_schedule(graph, order.order, device), request,
            plan_id=plan_id, planner_version=PLANNER_VERSION, solvers=[_order_report(order)],
            layout_time_limit=min(remaining, max(5.0, KEEP_LAYOUT_SHARE * request.time_limit_s)
                                  if maybe_fits else 5.0),
        )
        keep_all_arena = built.plan.devices[0].arena_bytes
        if keep_all_arena <= budget:
            return _validated(graph, built.plan, request, notify, started)
    built, profile = _rematerialize(graph, request, order, plan_id, notify, started,
                                    keep_all_arena)
    return _validated(graph, built.plan, request, notify, started, profile)


def _rematerialize(graph: Graph, request: PlanRequest, order: OrderResult, plan_id: str,
                   notify: ProgressCallback, started: float, keep_all_arena: int | None):
    """Remat + layout, retried with lowered targets while fragmentation overshoots a budget.
    `keep_all_arena`: the arena keeping everything needs (one device), a budget known to work."""
    from planner.profile.costs import costs_from_profile
    from planner.remat.rematerialize import plan_remat

    profile = profile_for(graph, request, notify)
    costs = costs_from_profile(profile, graph, list(request.budgets))
    budgets = dict(request.budgets)
    target = dict(budgets)
    total = request.time_limit_s
    for attempt in range(LAYOUT_RETRIES + 1):
        left = total - (time.perf_counter() - started)
        limit = max(1.0, left * REMAT_SHARE if attempt == 0 else left * 0.5)
        notify("remat", {"budgets": target, "attempt": attempt})
        result = plan_remat(graph, order.order, target, costs, time_limit=limit,
                            workers=request.workers, seed=request.seed,
                            memory_unit=request.alignment)
        if result.schedule is None:
            _raise_infeasible(graph, request, order, costs, result, keep_all_arena)
        notify("layout", {"peak_live_bytes": result.stats.peaks})
        remaining = max(1.0, total - (time.perf_counter() - started))
        built = build_plan(
            graph, result.schedule, request, plan_id=plan_id, planner_version=PLANNER_VERSION,
            solvers=[_order_report(order), _remat_report(result)],
            predicted_seconds=result.objective_seconds, layout_time_limit=min(remaining, 10.0),
        )
        over = _overshoot(built.plan)
        if not over:
            return built, profile
        for alternative in result.alternatives:
            # A slower schedule with lower peaks may lay out within the budgets: no new solve.
            if any(alternative.stats.peaks.get(d, 0) > budgets[d] - e for d, e in over.items()):
                continue
            remaining = max(1.0, total - (time.perf_counter() - started))
            built = build_plan(
                graph, alternative.schedule, request, plan_id=plan_id,
                planner_version=PLANNER_VERSION,
                solvers=[_order_report(order), _remat_report(result, alternative)],
                predicted_seconds=alternative.seconds, layout_time_limit=min(remaining, 5.0),
            )
            if not _overshoot(built.plan):
                return built, profile
        for device, excess in over.items():
            target[device] = max(1, target[device] - excess - request.alignment)
    raise InfeasibleError(
        f"the arenas of the best plans found exceed the budgets after {LAYOUT_RETRIES} retries "
        f"(fragmentation): {over}; ask for "
        + ", ".join(f"{d}={budgets[d] + e} B" for d, e in over.items()),
        smallest_feasible=max(budgets[d] + e for d, e in over.items()),
    )


def _overshoot(plan: Plan) -> dict[str, int]:
    """Bytes by which each device's arena exceeds its budget (devices within it left out)."""
    return {d.device: d.arena_bytes - d.budget_bytes for d in plan.devices
            if d.arena_bytes > d.budget_bytes}


def _raise_infeasible(graph, request, order, costs, result, keep_all_arena) -> None:
    """No plan within the budgets: say what to ask for. Proven infeasibility says so (the exact
    model's verdict); otherwise the smallest budget this planner is known to meet: a plan at the
    smallest peak the heuristics replayed, else keeping everything (`keep_all_arena`)."""
    from planner.remat.rematerialize import plan_remat

    lower = order_lower_bound(graph)
    home = result.problem.home if result.problem is not None else next(iter(request.budgets))
    verdict = ("proven infeasible for the fixed order" if result.status == "INFEASIBLE" else
               f"none found in {request.time_limit_s:g} s, not proven impossible")
    known = []
    if result.smallest_peak_bytes is not None:
        probe = plan_remat(graph, order.order, {home: result.smallest_peak_bytes}, costs,
                           time_limit=5.0, memory_unit=request.alignment, use_solver=False)
        if probe.schedule is not None:
            arena_request = request.model_copy(update={"budgets": {home: probe.stats.peaks[home]}})
            built = build_plan(graph, probe.schedule, arena_request, plan_id="probe",
                               planner_version=PLANNER_VERSION, solvers=[],
                               layout_time_limit=5.0)
            known.append(built.plan.devices[0].arena_bytes)
    if keep_all_arena is not None:
        known.append(keep_all_arena)
    if known:
        achieved = min(known)
        raise InfeasibleError(
            f"no plan within {dict(request.budgets)} B ({verdict}); the smallest budget this "
            f"planner meets on {home} is {achieved} B (no plan can go below {lower} B); ask for "
            f"at least {achieved} B, or allow more time",
            smallest_feasible=achieved,
        )
    raise InfeasibleError(
        f"no plan within {dict(request.budgets)} B ({verdict}); no plan can go below {lower} B "
        f"on one device; ask for more than {lower} B and allow more time",
        smallest_feasible=lower, is_lower_bound=True,
    )


def profile_for(graph: Graph, request: PlanRequest, notify: ProgressCallback):
    """The request's profile, else one measured now (CPU: quick timing policy, cached); extra
    host arenas `cpu:N` share the CPU's costs (planner.profile.costs.with_host_arenas)."""
    devices = list(request.budgets)
    profile = request.profile
    if profile is None:
        from planner.profile import QUICK_POLICY, profile_graph
        from planner.profile.costs import measured_as

        measured = list(dict.fromkeys(measured_as(d) for d in devices))
        notify("profile", {"devices": measured})
        try:
            profile = profile_graph(graph, measured, policy=QUICK_POLICY)
        except InvalidInputError as exc:
            gpus = [d for d in measured if d != "cpu"]
            if gpus:
                raise InvalidInputError(
                    f"budgets for {', '.join(gpus)} need per-op costs on that device, and this "
                    f"machine cannot measure them ({exc}); pass --profile with a profile "
                    "measured on a GPU machine (arenaplan profile MODEL --device cpu --device "
                    f"{gpus[0]} -o profile.json)"
                ) from None
            raise
    from planner.profile.costs import with_host_arenas

    return with_host_arenas(profile, devices)


def _validated(graph: Graph, plan: Plan, request: PlanRequest, notify, started,
               profile=None) -> Plan:
    notify("validate", {})
    report = validate_plan(graph, plan, profile or request.profile)
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


def _remat_report(result, chosen=None) -> SolverReport:
    """The remat phase's report; `chosen`: the runner-up schedule used instead of the best one
    (planner.remat.rematerialize.RematResult.alternatives), whose time, gap and counts it then
    gives."""
    notes = [f"model tier {result.tier} ({result.memory_model} memory)"]
    if result.model_status is not None:
        bound = (f", bound {result.model_bound_seconds:.6g} s"
                 if result.model_bound_seconds is not None else "")
        notes.append(f"CP-SAT on that model: {result.model_status}{bound} (valid for the "
                     "reduced model only)" if not result.exact_model else
                     f"CP-SAT: {result.model_status}{bound}")
    notes.append("bound: " + ("the exact model's" if result.exact_model else
                              "every op once on its fastest device (valid for any plan)"))
    notes += [f"reduction: {r.name} ({'exact' if r.exact else 'not exact'}): {r.detail}"
              for r in result.reductions]
    method, objective, stats, status, gap = (result.method, result.objective_seconds,
                                             result.stats, result.status, result.gap)
    if chosen is not None:
        notes.append(f"the fastest schedule ({result.method}) laid out past the budget; this "
                     "slower one with lower peaks lays out within it")
        method, objective, stats = chosen.name, chosen.seconds, chosen.stats
        gap = max(0.0, (objective - result.bound_seconds) / objective) if objective else 0.0
        status = "OPTIMAL" if gap <= 1e-9 else "FEASIBLE"
    if stats is not None:
        notes.append(f"{stats.recomputes} recomputations, {stats.copies} copies")
    notes += list(result.notes)
    return SolverReport(
        phase="remat", method=method, status=status, objective=objective,
        bound=result.bound_seconds, gap=gap, baseline=result.keep_all_seconds,
        seconds=result.seconds, notes=notes,
    )
