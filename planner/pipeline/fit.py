"""Rematerialization and layout until the arenas fit: the policy for fragmentation.

The remat solver bounds live bytes; the layout then places the buffers in one arena per device,
and fragmentation can make an arena exceed its budget. Schedules the remat search fills right up
to the budget keep live bytes near their peak for thousands of steps, where layouts fragment by
1-3% (GPT-2-small at persistent + half its activations). `RematFit` records, per device, the
worst ratio of arena to live-bytes peak seen (the *spread*), then tries the remat result's
runner-up schedules (lower peaks, slower; no new solve) whose peak times that spread fits,
nearly as fast as the best first; when none lays out within the budgets, it solves again with
each overshooting target lowered to the budget over the spread (and by at least the excess), up
to LAYOUT_RETRIES times while the request's time lasts (no lower than a quarter of the way from
the op-footprint bound to the budget), and takes a slower runner-up only when no retry is
left (then the first attempt's too, and as a last resort any runner-up whatever the spread).
When the request's time is spent before the first solve (no retry can follow it), that solve
aims LAST_CHANCE_MARGIN below each budget instead: an arena that misses the budget by
fragmentation could only be answered by a refusal; and when no retry can follow a layout, a
runner-up nearly as fast that leaves LATE_LAYOUT_MARGIN is laid out before a best schedule that
does not (and when that runner-up's layout overshoots, the best is laid out only if its peak
times the spread seen fits). Every solve's bound and status hold for the
budgets asked, whatever the target. When nothing found lays out within the budgets, the
smallest plan (planner.pipeline.infeasible.smallest_plan: the heuristics' schedule of least
peak) is the answer if it does, else a refusal naming a budget this planner meets.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from planner.ir.graph import Graph
from planner.memory.liveness import order_lower_bound
from planner.memory.schedule import Schedule
from planner.order import OrderResult
from planner.pipeline.infeasible import raise_infeasible, smallest_plan
from planner.plan.builder import BuiltPlan, build_plan
from planner.profile.costs import CostTable
from planner.remat.heuristics import Candidate
from planner.remat.rematerialize import RematResult, plan_remat
from planner.remat.report import order_report_beside, remat_report
from planner.time_budget import TimeBudget
from planner.version import PLANNER_VERSION
from schemas.plan import Plan, PlanRequest, SolverReport

LAYOUT_RETRIES = 3
# Runner-ups at most this much slower than the best schedule are laid out first; slower ones
# only when no retry is left: a retry aimed below the spread (before RETRY_BEFORE of the
# request's time) usually finds a schedule as fast as the best (GPT-2-small at persistent +
# half its activations: the first fitting runner-up, unfilled, was 1.49x keeping everything;
# the retry's filled schedule 1.04x).
RUNNER_UP_SLOWDOWN = 1.05
RETRY_BEFORE = 0.6
# A retry aims no lower than 1/RETRY_FLOOR of the way from the op-footprint bound to the budget.
RETRY_FLOOR = 4
# The share of each budget a first solve that no retry can follow leaves for the layout's
# fragmentation: the quick layouts such requests get (pyramid) laid the 20,000-op chain's
# eviction schedules out 6 B above their peaks (of 20,000 B; at 2 s the request was refused for
# 2 B over), GPT-2-small's 0.2-0.7% above and its schedules filled in one round 0.8-1.2% above
# (at 1% below its budget, one overshot by 0.1%: laying out the unfilled runner-up then took
# 0.9 s more, beyond its 5 s limit, for a step 1.7x as long). The chain's step at 2 s: 0.08%
# longer at 1.5% than at 1%.
LAST_CHANCE_MARGIN = 0.015
# The room a schedule laid out when no retry can follow should leave, when a runner-up nearly as
# fast leaves it: the layouts GPT-2-small's schedules get lie 0-0.6% above their peaks.
LATE_LAYOUT_MARGIN = 0.005


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
        target = dict(budgets) if self._may_retry() else self._with_margin(budgets)
        spread = dict.fromkeys(budgets, 1.0)
        slower: tuple[RematResult, float] | None = None  # runner-ups not laid out yet
        for attempt in range(LAYOUT_RETRIES + 1):
            result = self._solve(target, attempt, notify)
            if result.best is None and target != budgets and attempt == 0 \
                    and _seen_within(result, budgets):
                target = dict(budgets)  # nothing within the margin: the budgets themselves
                result = self._solve(target, attempt, notify)
            if result.best is None:
                if slower is None:
                    return self._smallest_or_refuse(result, None)
                # The lowered target has no schedule: the first attempt's slower ones.
                runner_up = (self._runner_up_within(slower[0], spread, (slower[1], math.inf))
                             or self._last_resort([slower[0]]))
                if runner_up is not None:
                    return runner_up
                break
            notify("layout", {"peak_live_bytes": result.best.stats.peaks})
            if not (attempt < LAYOUT_RETRIES and self._may_retry()):
                roomy = self._roomy_runner_up(result, spread)
                if roomy is not None:
                    return roomy
            over = self._expected_overshoot(result.best.stats.peaks, spread)
            if not over:  # else a roomier schedule laid out too large already
                built = self._layout(result, result.best.schedule)
                over = overshoot(built.plan)
                if not over:
                    return built
                _widen(spread, built.plan, result.best.stats.peaks)
            close = RUNNER_UP_SLOWDOWN * result.best.seconds
            runner_up = self._runner_up_within(result, spread, (0.0, close))
            lowered = {device: max(lowered_target(target[device], budgets[device], excess,
                                                  spread[device], self.request.alignment),
                                   self._floor(device))
                       for device, excess in over.items()}
            retry = (attempt < LAYOUT_RETRIES
                     and self.clock.elapsed() < RETRY_BEFORE * self.clock.usable()
                     and all(lowered[d] < target[d] for d in lowered))
            if runner_up is None and not retry:
                runner_up = (self._runner_up_within(result, spread, (close, math.inf))
                             or self._last_resort([result, *(slower[:1] if slower else ())]))
            if runner_up is not None:
                return runner_up
            if not retry:
                break
            if slower is None:
                slower = (result, close)  # the first attempt's: the least recomputation
            target.update(lowered)
        return self._smallest_or_refuse(None, over)

    def _smallest_or_refuse(self, result: RematResult | None, over: dict[str, int] | None
                            ) -> BuiltPlan:
        """The smallest plan (planner.pipeline.infeasible.smallest_plan: one device, while the
        request's time lasts: its first probe completes whatever the time, a second on the
        20,000-op chain; once the time is spent, only a schedule kept from an earlier request,
        planner.remat.remembered) when it lays out within the budget, else the refusal naming
        what to ask for; `result`: the search that found nothing, `over`: by how much the
        schedules it found overshot."""
        smallest = None
        if len(self.request.budgets) == 1:
            seen = () if result is None or result.smallest_peak_bytes is None else (
                result.smallest_peak_bytes,)
            smallest = smallest_plan(self.graph, self.request, self.order, self.costs,
                                     self.plan_id,
                                     0.0 if self.clock.spent() else self.clock.smallest_plan(),
                                     self.other_orders, seen)
            if smallest is not None and not overshoot(smallest.plan):
                return smallest
        # An arena holds the order's peak at least: keeping everything cannot beat a smaller
        # plan (laying it out took the 20,000-op chain's refusals 1.1-2.7 s more).
        keep_all = (None if smallest is not None
                    and smallest.plan.devices[0].arena_bytes <= self.order.peak_bytes
                    else self.keep_all_arena)
        raise_infeasible(self.graph, self.request, result, smallest, keep_all,
                         fragmented=over, elapsed_s=self.clock.elapsed(),
                         out_of_time=self.clock.spent())

    def _solve(self, target: dict[str, int], attempt: int,
               notify: Callable[[str, dict], None]) -> RematResult:
        notify("remat", {"budgets": target, "attempt": attempt})
        return plan_remat(
            self.graph, self.order.order, target, self.costs,
            time_limit=self.clock.remat(attempt), workers=self.request.workers,
            seed=self.request.seed, memory_unit=self.request.alignment,
            other_orders=self.other_orders, bound_budgets=self.request.budgets,
        )

    def _may_retry(self) -> bool:
        """Whether a retry could still follow a solve started now (see plan)."""
        return self.clock.elapsed() < RETRY_BEFORE * self.clock.usable()

    def _roomy_runner_up(self, result: RematResult, spread: dict[str, float]
                         ) -> BuiltPlan | None:
        """When no retry can follow the layout and the best schedule fills a budget to within
        LATE_LAYOUT_MARGIN: a runner-up nearly as fast (RUNNER_UP_SLOWDOWN) that leaves the
        margin, if one lays out within the budgets. Laying out the best first risks two layouts
        where one was budgeted (GPT-2-small at persistent + half its activations, 10 s: the best
        filled to 99.95% overshot by its layout's 0.1%, and the runner-up's layout took the
        request 0.8-1.0 s past its limit; the one filled to 99.4% was 0.08% slower). A layout
        that overshoots widens `spread` (the caller's)."""
        assert result.best is not None
        margin = 1 / (1 - LATE_LAYOUT_MARGIN)
        budgets = self.request.budgets
        if all(peak * margin <= budgets[d] for d, peak in result.best.stats.peaks.items()
               if d in budgets):
            return None
        wanted = {d: max(margin, spread[d]) for d in budgets}
        seen = dict(wanted)
        built = self._runner_up_within(result, seen,
                                       (0.0, RUNNER_UP_SLOWDOWN * result.best.seconds))
        spread.update({d: seen[d] for d in budgets if seen[d] > wanted[d]})
        return built

    def _expected_overshoot(self, peaks: dict[str, int], spread: dict[str, float]
                            ) -> dict[str, int]:
        """Bytes by which a schedule of `peaks` would exceed each budget laid out as fragmented
        as the worst layout seen (devices within it left out): a schedule fuller than one whose
        layout overshot is not laid out (GPT-2-small at persistent + half its activations, 5 s:
        the runner-up filled to 99% laid out 0.6% above its peak, and laying out the best, at
        99.95%, after it took the request 0.8 s past its limit)."""
        budgets = self.request.budgets
        return {d: excess for d, peak in peaks.items() if d in budgets
                and (excess := math.ceil(peak * spread[d]) - budgets[d]) > 0}

    def _with_margin(self, budgets: dict[str, int]) -> dict[str, int]:
        """`budgets` less LAST_CHANCE_MARGIN (at least one alignment; never below a retry's
        floor nor above the budget)."""
        unit = self.request.alignment
        return {d: min(b, max(self._floor(d),
                              b - max(unit, math.ceil(b * LAST_CHANCE_MARGIN / unit) * unit)))
                for d, b in budgets.items()}

    def _last_resort(self, results: list[RematResult]) -> BuiltPlan | None:
        """Any runner-up of `results` that lays out within the budgets, whatever the spread
        seen: layouts of schedules near the op-footprint bound vary from 1% to 3% above their
        peaks (GPT-2-small at persistent + half its activations), and the worst one seen rules
        out schedules that would fit."""
        for result in results:
            built = self._runner_up_within(result, dict.fromkeys(self.request.budgets, 1.0),
                                           (0.0, math.inf))
            if built is not None:
                return built
        return None

    def _floor(self, device: str) -> int:
        """The lowest retry target worth a solve: with one device, a quarter of the way from
        the op-footprint bound to the budget (no schedule goes below the bound, and few reach
        it). GPT-2-small at persistent + half its activations has 1.7% between them; its best
        arena overshot by 1.8%, and the budget over that spread fell below the bound, where a
        retry finds nothing, while schedules near the bound lay out 1.1% above their peak."""
        if len(self.request.budgets) != 1:
            return 1
        bound = order_lower_bound(self.graph)
        return bound + max(0, self.request.budgets[device] - bound) // RETRY_FLOOR

    def _layout(self, result: RematResult, schedule: Schedule) -> BuiltPlan:
        return build_plan(
            self.graph, schedule, self.request, plan_id=self.plan_id,
            planner_version=PLANNER_VERSION, solvers=self._reports(result),
            predicted_seconds=result.objective_seconds,
            layout_time_limit=self.clock.remat_layout(),
        )

    def _reports(self, result: RematResult, chosen: Candidate | None = None
                 ) -> tuple[SolverReport, SolverReport]:
        """The order and remat phases' reports of a plan of `result` (`chosen`: its runner-up
        laid out instead of the best)."""
        picked = chosen or result.best
        recomputes = picked.stats.recomputes if picked is not None else 0
        return (order_report_beside(self.order.report(), recomputes),
                remat_report(result, chosen))

    def _runner_up_within(self, result: RematResult, spread: dict[str, float],
                          seconds: tuple[float, float]) -> BuiltPlan | None:
        """The first of the result's slower schedules taking (lo, hi] `seconds` that lays out
        within the budgets, among those whose peaks times the spread seen so far fit (each
        layout tried widens it); once the request's time is spent, no more after the first
        tried (a runner-up filled below the budget usually fits: giving up without one would
        answer nothing)."""
        budgets = self.request.budgets
        tried = 0
        for alternative in result.alternatives:
            if tried and self.clock.elapsed() >= self.clock.usable():
                return None
            lo, hi = seconds
            if not lo < alternative.seconds <= hi or any(
                    peak * spread[d] > budgets[d] for d, peak in alternative.stats.peaks.items()
                    if d in budgets):
                continue
            built = build_plan(
                self.graph, alternative.schedule, self.request, plan_id=self.plan_id,
                planner_version=PLANNER_VERSION,
                solvers=self._reports(result, alternative),
                predicted_seconds=alternative.seconds,
                layout_time_limit=self.clock.runner_up_layout(),
            )
            tried += 1
            if not overshoot(built.plan):
                return built
            _widen(spread, built.plan, alternative.stats.peaks)
        return None


def _seen_within(result: RematResult, budgets: dict[str, int]) -> bool:
    """Whether a search that found nothing within lowered targets may find something within
    `budgets` (one device): some schedule it replayed had a peak within them. When its smallest
    peak exceeds them, or it replayed none (every eviction run gave up: recomputations
    multiplied), a second search 1.5% higher finds nothing either: the 20,000-op chain refused
    at 1,000 B spent 0.7 s of its 2 s limit on it. With several devices: always."""
    if len(budgets) != 1:
        return True
    seen = result.smallest_peak_bytes
    return seen is not None and seen <= next(iter(budgets.values()))


def lowered_target(target: int, budget: int, excess: int, spread: float, alignment: int) -> int:
    """The next remat target of a device whose arena overshot by `excess`: below the last one by
    at least the excess, and at most the budget over the spread (so that a schedule whose peak
    reaches the target, laid out as fragmented as the worst layout seen, fits), less one
    alignment."""
    return max(1, min(target - excess, int(budget / spread)) - alignment)


def _widen(spread: dict[str, float], plan: Plan, peaks: dict[str, int]) -> None:
    """Raise each device's spread to this layout's arena over its schedule's live-bytes peak."""
    for device in plan.devices:
        peak = peaks.get(device.device, 0)
        if device.device in spread and peak > 0:
            spread[device.device] = max(spread[device.device], device.arena_bytes / peak)


def overshoot(plan: Plan) -> dict[str, int]:
    """Bytes by which each device's arena exceeds its budget (devices within it left out)."""
    return {d.device: d.arena_bytes - d.budget_bytes for d in plan.devices
            if d.arena_bytes > d.budget_bytes}
