"""A remat solve that no retry can follow leaves the layout room (planner.pipeline.fit), and so does
the schedule laid out after it when a runner-up nearly as fast allows.

The 20,000-op chain at a 2 s limit: the eviction schedule peaked 4 B under the 20,000 B
budget, its quick layout 6 B above the peak, and the request was refused for 2 B with no time
for a retry. Such a solve now aims LAST_CHANCE_MARGIN below the budget; the bound it reports
still holds for the budget itself, and the order phase's keep-everything figures say that they
do not bound a plan that recomputes."""

from __future__ import annotations

import math
import random
import time
from dataclasses import replace

import pytest

from planner.errors import InfeasibleError
from planner.ir.graph_json import graph_from_node_link
from planner.order import optimize_order
from planner.pipeline.fit import LAST_CHANCE_MARGIN, LATE_LAYOUT_MARGIN, RETRY_BEFORE, RematFit
from planner.plan.validate import validate_plan
from planner.profile.costs import costs_from_profile
from planner.remat.bounds import crossing_bound
from planner.remat.rematerialize import plan_remat
from planner.remat.report import KEEP_ALL_FIGURES
from planner.time_budget import TimeBudget
from schemas.plan import PlanRequest
from tests.support.chains import chain_json

BUDGET = 1000


def fitted(clock: TimeBudget, budget: int = BUDGET, asked: list[dict] | None = None):
    """The chain planned at `budget`; `asked` collects the budgets of its remat solves."""
    asked = [] if asked is None else asked
    graph, profile = graph_from_node_link(chain_json(random.Random(0), 1000), name="chain")
    request = PlanRequest(budgets={"cpu": budget}, profile=profile, alignment=1,
                          time_limit_s=clock.limit_s)
    order = optimize_order(graph, use_solver=False, time_limit=1)
    costs = costs_from_profile(profile, graph, ["cpu"])
    fit = RematFit(graph, request, order, costs, "t", clock, keep_all_arena=None)
    built = fit.plan(lambda phase, info: asked.append(info["budgets"]) if phase == "remat"
                     else None)
    return graph, profile, order, costs, built.plan, asked


def test_a_solve_no_retry_can_follow_aims_below_the_budget():
    spent = TimeBudget(4.0, started=time.perf_counter() - 4.0)  # past RETRY_BEFORE already
    assert spent.elapsed() > RETRY_BEFORE * spent.usable()
    graph, profile, order, costs, plan, asked = fitted(spent)
    assert asked == [{"cpu": BUDGET - math.ceil(BUDGET * LAST_CHANCE_MARGIN)}]
    assert plan.devices[0].arena_bytes <= BUDGET
    assert validate_plan(graph, plan, profile).ok
    order_report, remat = plan.solvers[0], plan.solvers[1]
    assert remat.phase == "remat" and any("of 1000 B" in n for n in remat.notes)
    assert remat.bound == crossing_bound(graph, order.order, "cpu", BUDGET, costs).seconds
    assert order_report.phase == "order" and KEEP_ALL_FIGURES in order_report.notes


def test_a_search_that_replayed_nothing_near_the_budget_is_not_run_again_at_it():
    """Nothing within the lowered target, and nothing it replayed came within the budget
    either: a second search 1.5% higher would find nothing, so the refusal comes at once, and
    it suggests more time, the phases' share of the limit being spent."""
    spent = TimeBudget(4.0, started=time.perf_counter() - 4.0)
    asked: list[dict] = []
    with pytest.raises(InfeasibleError, match="allow more time"):
        fitted(spent, budget=60, asked=asked)
    assert asked == [{"cpu": 60 - math.ceil(60 * LAST_CHANCE_MARGIN)}]


@pytest.mark.slow  # 15-35 s: `make test` stays under 10 min on 2 cores
def test_with_time_for_a_retry_the_first_solve_aims_at_the_budget():
    graph, profile, order, costs, plan, asked = fitted(TimeBudget(20.0))
    assert asked[0] == {"cpu": BUDGET}
    assert plan.devices[0].arena_bytes <= BUDGET
    assert not any("of 1000 B" in n for n in plan.solvers[1].notes)


def _full_and_roomy(clock: TimeBudget, solved_at: float = 0.98, claimed: float | None = None):
    """A RematFit on the chain and a result whose best schedule claims to fill the budget
    (its true peak leaves room) beside a schedule solved at `solved_at` of the budget, 0.1%
    slower, as a runner-up (claiming a peak of `claimed` of the budget when given)."""
    graph, profile = graph_from_node_link(chain_json(random.Random(0), 1000), name="chain")
    request = PlanRequest(budgets={"cpu": BUDGET}, profile=profile, alignment=1,
                          time_limit_s=clock.limit_s)
    order = optimize_order(graph, use_solver=False, time_limit=1)
    costs = costs_from_profile(profile, graph, ["cpu"])
    result = plan_remat(graph, order.order, {"cpu": int(BUDGET * solved_at)}, costs,
                        time_limit=2, memory_unit=1)
    real = result.best
    assert real is not None
    if claimed is not None:
        real = replace(real, stats=replace(real.stats, peaks={"cpu": int(BUDGET * claimed)}))
    full = replace(real, name="full", stats=replace(real.stats, peaks={"cpu": BUDGET},
                                                    seconds=real.seconds / 1.001))
    fit = RematFit(graph, request, order, costs, "t", clock, keep_all_arena=None)
    return fit, replace(result, best=full, alternatives=(real,)), real


def test_with_no_retry_left_a_runner_up_leaving_room_is_laid_out_first():
    fit, result, real = _full_and_roomy(TimeBudget(60.0))
    assert real.stats.peaks["cpu"] <= BUDGET * (1 - LATE_LAYOUT_MARGIN)
    spread = {"cpu": 1.0}
    built = fit._roomy_runner_up(result, spread)
    assert built is not None and built.plan.devices[0].arena_bytes <= BUDGET
    assert built.plan.solvers[1].method == real.name
    assert spread == {"cpu": 1.0}  # nothing overshot: nothing seen
    # a best schedule that leaves the room itself is laid out as it is
    assert fit._roomy_runner_up(replace(result, best=real, alternatives=()), spread) is None


def test_a_roomier_schedule_laid_out_too_large_rules_out_laying_out_the_fuller_best():
    """The runner-up's schedule really peaks near 1.2x the budget but claims 99%: its layout
    overshoots, the spread seen says by how much, and the best (claiming 100%) would overshoot
    by more, so it is not laid out."""
    fit, result, real = _full_and_roomy(TimeBudget(60.0), solved_at=1.2, claimed=0.99)
    spread = {"cpu": 1.0}
    assert fit._roomy_runner_up(result, spread) is None
    assert spread["cpu"] > 1.1
    assert fit._expected_overshoot(result.best.stats.peaks, spread)["cpu"] > 0.1 * BUDGET
    assert fit._expected_overshoot({"cpu": BUDGET // 2}, spread) == {}
