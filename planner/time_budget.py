"""How a request's time limit is shared between the planner's phases: every share in one place.

`TimeBudget` is the pipeline's clock (planner.pipeline): ordering, the keep-everything layout,
rematerialization, the layout of each remat schedule and the retries all take their seconds from
it. `REMAT_SHARES` splits one `plan_remat` call's own limit between its solvers
(planner.remat.rematerialize, planner.remat.solve), and `MIN_BUDGET_SHARES` splits a
min-budget query's limit (planner.queries). This module imports nothing of the planner, so that
every layer may read its shares here without importing the layers above it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

# The seconds any phase gets however little time is left: a phase cut to nothing returns
# nothing, which is worse than overrunning the limit a little. Under short limits the floor is
# this share of the limit instead, so that the floors of the phases after the first fit in the
# overrun the issue allows (5%, and 1 s under 20 s).
PHASE_FLOOR_S = 1.0
PHASE_FLOOR_SHARE = 0.1
# Seconds per op and per tensor of the graph that the pipeline keeps back for building and
# validating the last plan (planner.plan: the replay, the buffers and steps, the kernel
# workspace, the independent validation), which no time limit shortens, its layout left out.
# Both walk the plan's steps (each computation, recomputations too, and each free): a remat
# schedule at persistent + half the activations has 1.2-1.6 steps per op and tensor, and the
# development machine's two shared cores take 27-70 us a step (idle to busy). GPT-2-small
# (4,246 ops, 4,778 tensors; 14,290 steps unfilled at 5 s): 0.50-0.55 s idle; MobileNetV2
# (4,415, 5,002; 11,597): 0.7-0.8 s busy; the 20,000-op chain (20,001, 20,003; 48,711):
# 1.3-2.4 s. Kept per op alone (60 us), 0.25 s for GPT-2-small made its 5 s requests take
# 6.3-6.7 s.
FINISH_S_PER_VALUE = 60e-6

# Layout time limits: the keep-everything arena when remat is certainly needed anyway, and when
# the budget leaves room above its live bytes, a remat schedule's arenas, a runner-up
# schedule's arenas; the most the smallest plan (the last resort before a refusal) takes.
QUICK_LAYOUT_S = 5.0
ROOMY_LAYOUT_S = 2.0
REMAT_LAYOUT_S = 10.0
SMALLEST_PLAN_S = 10.0


@dataclass(frozen=True)
class PipelineShares:
    """Shares of the request's time limit. When keeping everything may fit, ordering gets
    `order_may_fit` and the keep-everything layout `keep_layout`, so that rematerialization
    keeps half the time when fragmentation pushes that arena just over the budget. When
    rematerialization is certainly needed ordering gets `order_remat`. Profiling (a plan made
    without a profile) gets `profile` of what is left then. The first remat solve
    gets `remat_first` of what is left, each retry `remat_retry` of what is left then; the
    layout of a remat schedule `remat_layout` of the limit (see TimeBudget.remat_layout)."""

    order_may_fit: float = 0.3
    keep_layout: float = 0.2
    order_remat: float = 0.1
    profile: float = 0.3
    remat_first: float = 0.8
    remat_retry: float = 0.5
    remat_layout: float = 0.1


@dataclass(frozen=True)
class RematShares:
    """Where each phase of one `plan_remat` call must stop, as shares of its time limit: the
    eviction simulation (planner.remat.evict) first, then the stage heuristics (they win on
    mid-sized graphs), LP rounding, CP-SAT (model build included; it supplies the model's
    bound), and the fill pass (planner.remat.fill) has the rest. Past their share the
    heuristics stop once one of them fits, and at `last_resort` in any case.
    `heuristics_alone`: their share in a feasibility probe (no solver, no fill). `repair`: the
    share of what is left that CP-SAT may spend pushing the peak down to the budget when no
    heuristic fits (planner.remat.solve)."""

    evict: float = 0.2
    evict_large: float = 0.5
    heuristics: float = 0.5
    lp_rounding: float = 0.6
    solver_until: float = 0.85
    heuristics_alone: float = 0.9
    last_resort: float = 0.85
    repair: float = 0.5


@dataclass(frozen=True)
class MinBudgetShares:
    """Shares of a min-budget query's time limit (planner.queries.min_budget): measuring a
    profile when none is given, at most `profile` of it (the pipeline's share); a tenth for
    keeping everything, a twentieth for the order, up to a fifth for CP-SAT's min-peak model, the
    bisection until 60% of it (planner.remat.smallest shares that out between its probes), the
    rest for confirming plans, each at least a fifth of the limit."""

    profile: float = 0.3
    keep_all: float = 0.1
    order: float = 0.05
    min_peak: float = 0.2
    bisection_until: float = 0.6
    confirm_at_least: float = 0.2
    keep_all_floor_s: float = 2.0


# The share of a max-batch query's time left that each of its probes (a whole plan request at
# one value of the dim) gets (planner.queries.max_batch): the first a third of the limit, the
# next a third of the rest, and so on, so that the probes fit the limit however many follow.
MAX_BATCH_PROBE_SHARE = 1 / 3

PIPELINE_SHARES = PipelineShares()
REMAT_SHARES = RematShares()
MIN_BUDGET_SHARES = MinBudgetShares()


@dataclass(frozen=True)
class TimeBudget:
    """One request's time limit and when it started: each phase asks it for its seconds.

    `reserve_s`: the seconds kept back at the end for building and validating the plan
    (`for_graph` estimates them from the graph's size); the phases share the rest."""

    limit_s: float
    started: float = field(default_factory=time.perf_counter)
    shares: PipelineShares = PIPELINE_SHARES
    reserve_s: float = 0.0

    @classmethod
    def for_graph(cls, limit_s: float, n_ops: int, n_tensors: int,
                  started: float | None = None) -> TimeBudget:
        """The clock of a request on a graph of `n_ops` ops and `n_tensors` tensors, keeping
        FINISH_S_PER_VALUE per op and per tensor, started at `started` (perf_counter; now by
        default)."""
        return cls(limit_s, started=time.perf_counter() if started is None else started,
                   reserve_s=FINISH_S_PER_VALUE * (n_ops + n_tensors))

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def usable(self) -> float:
        """The limit less the reserve: what the phases share."""
        return max(0.0, self.limit_s - self.reserve_s)

    def floor(self) -> float:
        """The least a phase gets (PHASE_FLOOR_S, less under short limits)."""
        return min(PHASE_FLOOR_S, PHASE_FLOOR_SHARE * self.limit_s)

    def spent(self) -> bool:
        """Whether the phases' share is used up (only the reserve is left)."""
        return self.elapsed() >= self.usable()

    def left(self) -> float:
        """Seconds left before the reserve, at least the floor."""
        return max(self.floor(), self.usable() - self.elapsed())

    def order(self, maybe_fits: bool) -> float:
        share = self.shares.order_may_fit if maybe_fits else self.shares.order_remat
        return self.usable() * share

    def keep_layout(self, maybe_fits: bool, roomy: bool = False) -> float:
        """The keep-everything layout: its share when keeping everything may just fit, else
        QUICK_LAYOUT_S; ROOMY_LAYOUT_S when the budget leaves the arena room above the live
        bytes (more time would only shave a fraction of a percent off it)."""
        cap = (max(QUICK_LAYOUT_S, self.shares.keep_layout * self.usable()) if maybe_fits
               else QUICK_LAYOUT_S)
        return min(self.left(), ROOMY_LAYOUT_S if roomy else cap)

    def profile(self) -> float:
        """Measuring the ops a plan without a profile needs: `profile` of what is left (ops
        not measured by then get labelled estimates, planner.profile.runner); the cache makes
        a second request's profile free."""
        return max(self.floor(), (self.usable() - self.elapsed()) * self.shares.profile)

    def remat(self, attempt: int) -> float:
        """The remat solve of `attempt` (0: the first; then the retries after an overshoot)."""
        share = self.shares.remat_first if attempt == 0 else self.shares.remat_retry
        return max(self.floor(), (self.usable() - self.elapsed()) * share)

    def remat_layout(self) -> float:
        """A remat schedule's layout: a tenth of the limit, between ROOMY_LAYOUT_S and
        REMAT_LAYOUT_S (when it misses the budget, the runner-ups and a retry need the rest)."""
        return min(self.left(), REMAT_LAYOUT_S,
                   max(ROOMY_LAYOUT_S, self.shares.remat_layout * self.limit_s))

    def runner_up_layout(self) -> float:
        return min(self.left(), QUICK_LAYOUT_S)

    def smallest_plan(self) -> float:
        """The last resort when no schedule found lays out within the budgets (planner.pipeline
        .infeasible.smallest_plan): what is left, at least the floor, at most SMALLEST_PLAN_S."""
        return min(SMALLEST_PLAN_S, self.left())
