"""The answer to a request no plan was found for: what budget to ask for instead.

Below the op-footprint bound (planner.memory.liveness.order_lower_bound) no plan exists, and the
error says so with that proven bound. Otherwise it names the smallest budget this planner is
known to meet: the arena of a plan at the smallest peak the remat heuristics replayed (probed
with the heuristics alone), else the keep-everything arena; and whether the remat model proved
the budget impossible for the order or only found nothing in the time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NoReturn

from planner.errors import InfeasibleError
from planner.ir.graph import Graph
from planner.memory.liveness import order_lower_bound
from planner.order import OrderResult
from planner.plan.builder import build_plan
from planner.profile.costs import CostTable
from planner.remat.rematerialize import RematResult, plan_remat
from planner.time_budget import PROBE_S
from planner.version import PLANNER_VERSION
from schemas.plan import PlanRequest


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


def raise_infeasible(graph: Graph, request: PlanRequest, order: OrderResult, costs: CostTable,
                     result: RematResult, keep_all_arena: Callable[[], int] | None) -> NoReturn:
    """No plan within the budgets: say what to ask for. Proven infeasibility says so (the exact
    model's verdict); otherwise the smallest budget this planner is known to meet: a plan at the
    smallest peak the heuristics replayed, else keeping everything (`keep_all_arena`)."""
    lower = order_lower_bound(graph)
    home = result.home
    verdict = ("proven infeasible for the fixed order" if result.status == "INFEASIBLE" else
               f"none found in {request.time_limit_s:g} s, not proven impossible")
    known = []
    if result.smallest_peak_bytes is not None:
        probe = _probe_arena(graph, request, order, costs, home, result.smallest_peak_bytes)
        if probe is not None:
            known.append(probe)
    if keep_all_arena is not None:
        known.append(keep_all_arena())
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


def _probe_arena(graph: Graph, request: PlanRequest, order: OrderResult, costs: CostTable,
                 home: str, peak_bytes: int) -> int | None:
    """The arena of the heuristics' plan at `peak_bytes` on `home`, if they find one again."""
    probe = plan_remat(graph, order.order, {home: peak_bytes}, costs, time_limit=PROBE_S,
                       memory_unit=request.alignment, use_solver=False)
    if probe.best is None:
        return None
    arena_request = request.model_copy(update={"budgets": {home: probe.best.stats.peaks[home]}})
    built = build_plan(graph, probe.best.schedule, arena_request, plan_id="probe",
                       planner_version=PLANNER_VERSION, layout_time_limit=PROBE_S)
    return built.plan.devices[0].arena_bytes
