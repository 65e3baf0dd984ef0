"""Rematerialization and layout until the arenas fit: the policy for fragmentation.

The remat solver bounds live bytes; the layout then places the buffers in one arena per device,
and fragmentation can make an arena exceed its budget. `RematFit` then tries the remat result's
runner-up schedules (lower peaks, slower; no new solve) and, when none lays out within the
budgets, solves again with each overshooting target lowered by its excess (and one alignment),
up to LAYOUT_RETRIES times. No schedule at all means infeasible (planner.pipeline.infeasible).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from planner.errors import InfeasibleError
from planner.ir.graph import Graph
from planner.memory.schedule import Schedule
from planner.order import OrderResult
from planner.pipeline.infeasible import raise_infeasible
from planner.plan.builder import BuiltPlan, build_plan
from planner.profile.costs import CostTable
from planner.remat.rematerialize import RematResult, plan_remat
from planner.remat.report import remat_report
from planner.time_budget import TimeBudget
from planner.version import PLANNER_VERSION
from schemas.plan import Plan, PlanRequest

LAYOUT_RETRIES = 3


@dataclass(frozen=True)
class RematFit:
    """Remat + layout of one request, retried with lowered targets while an arena overshoots.
    `keep_all_arena`: the arena keeping everything needs (one device; laid out when called), a
    budget known to work; the infeasibility answer names it."""

    graph: Graph
    request: PlanRequest
    order: OrderResult
    costs: CostTable
    plan_id: str
    clock: TimeBudget
    keep_all_arena: Callable[[], int] | None
    # Other orders the eviction simulation may use (an order tuned for keeping everything can
    # leave more than the budget that eviction cannot touch).
    other_orders: tuple[tuple[int, ...], ...] = ()

    def plan(self, notify: Callable[[str, dict], None]) -> BuiltPlan:
        budgets = dict(self.request.budgets)
        target = dict(budgets)
        for attempt in range(LAYOUT_RETRIES + 1):
            notify("remat", {"budgets": target, "attempt": attempt})
            result = plan_remat(
                self.graph, self.order.order, target, self.costs,
                time_limit=self.clock.remat(attempt), workers=self.request.workers,
                seed=self.request.seed, memory_unit=self.request.alignment,
                other_orders=self.other_orders,
            )
            if result.best is None:
                raise_infeasible(self.graph, self.request, self.order, self.costs, result,
                                 self.keep_all_arena)
            notify("layout", {"peak_live_bytes": result.best.stats.peaks})
            built = self._layout(result, result.best.schedule)
            over = overshoot(built.plan)
            if not over:
                return built
            runner_up = self._runner_up_within(result, over)
            if runner_up is not None:
                return runner_up
            for device, excess in over.items():
                target[device] = max(1, target[device] - excess - self.request.alignment)
        raise InfeasibleError(
            f"the arenas of the best plans found exceed the budgets after {LAYOUT_RETRIES} "
            f"retries (fragmentation): {over}; ask for "
            + ", ".join(f"{d}={budgets[d] + e} B" for d, e in over.items()),
            smallest_feasible=max(budgets[d] + e for d, e in over.items()),
        )

    def _layout(self, result: RematResult, schedule: Schedule) -> BuiltPlan:
        return build_plan(
            self.graph, schedule, self.request, plan_id=self.plan_id,
            planner_version=PLANNER_VERSION,
            solvers=(self.order.report(), remat_report(result)),
            predicted_seconds=result.objective_seconds,
            layout_time_limit=self.clock.remat_layout(),
        )

    def _runner_up_within(self, result: RematResult, over: dict[str, int]
                          ) -> BuiltPlan | None:
        """The first of the result's slower schedules with lower peaks that lays out within the
        budgets, skipping those whose peaks leave no room for the best one's fragmentation."""
        budgets = self.request.budgets
        for alternative in result.alternatives:
            if any(alternative.stats.peaks.get(d, 0) > budgets[d] - e for d, e in over.items()):
                continue
            built = build_plan(
                self.graph, alternative.schedule, self.request, plan_id=self.plan_id,
                planner_version=PLANNER_VERSION,
                solvers=(self.order.report(), remat_report(result, alternative)),
                predicted_seconds=alternative.seconds,
                layout_time_limit=self.clock.runner_up_layout(),
            )
            if not overshoot(built.plan):
                return built
        return None


def overshoot(plan: Plan) -> dict[str, int]:
    """Bytes by which each device's arena exceeds its budget (devices within it left out)."""
    return {d.device: d.arena_bytes - d.budget_bytes for d in plan.devices
            if d.arena_bytes > d.budget_bytes}
