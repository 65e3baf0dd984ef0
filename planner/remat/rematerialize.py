"""`plan_remat`: a schedule for a graph under per-device budgets, with an honest report.

Graph + order + budgets (bytes) + costs -> with one device, the eviction simulation's schedules
(planner.remat.evict: linear, any size) -> up to LARGE_GRAPH_OPS ops, the most faithful problem
that fits the time limit (planner.remat.configure), its heuristics and CP-SAT
(planner.remat.solve), decisions emitted as `planner.memory.schedule.Schedule`s
(planner.remat.emit) -> the fastest schedules drop the recomputations the budget affords
(planner.remat.fill). Every schedule is checked by replaying it (simulate) against the budgets;
the bound is the larger of the crossing bound (planner.remat.bounds) and, when exact, the
model's. The model counts memory in `memory_unit`-byte units, every tensor rounded up (the
alignment of the arena), so it never undercounts what the layout has to place.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import zip_longest

import numpy as np

from planner.ir.graph import Graph
from planner.memory.liveness import lower_bound_reason, order_lower_bound
from planner.memory.schedule import Schedule, first_computations, sequential_schedule
from planner.memory.simulate import ScheduleStats, simulate
from planner.order.just_in_time import deferred
from planner.profile.costs import CostTable
from planner.remat import baselines
from planner.remat.bounds import CrossingBound, crossing_bound
from planner.remat.configure import base_reductions, configure, home_device
from planner.remat.decision import Decision, evaluate
from planner.remat.emit import emit_schedule
from planner.remat.evict import LATE, OTHER_ORDER, Evictions, evict_candidates, source_orders
from planner.remat.fill import Pace, fill_budget
from planner.remat.heuristics import Candidate, heuristic_candidates, replay
from planner.remat.lp_rounding import lp_rounding
from planner.remat.problem import Reduction, RematProblem
from planner.remat.solve import minimize_peak, solve_problem
from planner.time_budget import REMAT_SHARES
from schemas.plan import SolverStatus

# The bound that ignores the budget.
ONCE_BOUND = "every op once on its fastest device (valid for any plan)"
# Runners-up kept beside the best schedule, for when its layout fragments past a budget.
ALTERNATIVES = 8
# Past this many ops neither LP rounding nor CP-SAT runs: on 4,000-op graphs the models the time
# affords (segments of 15 ops) gave nothing but a bound, while their solves took most of the time
# the heuristics and the fill pass use better (bench/remat).
LARGE_GRAPH_OPS = 1500
# Past LARGE_GRAPH_OPS the search ends long before its limit (ResNet-18-narrow at persistent +
# 30% of its activations: 1.3 s of 45 s), and jittered restarts of the eviction simulation
# (_restarted) have the rest. They stop after STALLED_RESTARTS in a row that found nothing at
# least RESTART_GAIN faster. Below it the stage models have the time; restarts there too found
# 1-2% (UNet-small and UNet-Adam) and made `make test` 24% slower: on the 1,000-op chain each
# restart found a schedule a little faster, and a 20 s request ran to its deadline.
STALLED_RESTARTS = 3
RESTART_GAIN = 0.005
# CP-SAT's least time on the model (its own presolve needs some; below, the hint is all it says):
# with less of its share left, no model is built.
SOLVER_FLOOR_S = 0.2
# Devices a model places ops on (planner.remat.configure builds copy literals per pair).
MODEL_DEVICES = 4
# How many of the fastest candidates the fill pass improves (the eviction schedules of several
# factors among them: planner.remat.evict.FACTORS), and how far below the budget it fills the
# best one's source again (room for the layout's fragmentation: GPT-2-small's schedules filled
# to the budget lay out 0.1-0.6% above their peaks in half a second, 1-3% in more).
FILLED = 5
FILL_MARGINS = (0.01, 0.02)


@dataclass(frozen=True)
class ModelOutcome:
    """The model plan_remat chose (planner.remat.configure) and what CP-SAT said about it."""

    tier: str  # which model (planner.remat.configure)
    memory_model: str
    reductions: tuple[Reduction, ...]
    exact: bool  # no reduction can cut off a better schedule of this order
    status: SolverStatus | None = None  # CP-SAT on that model; None: not run
    bound_seconds: float | None = None  # valid for that (possibly reduced) model only


@dataclass(frozen=True)
class RematResult:
    best: Candidate | None  # the fastest replayed schedule within the budgets
    status: SolverStatus  # see plan_remat
    bound_seconds: float  # a lower bound valid for every schedule of this order
    bound_name: str  # which bound that is (see _lower_bound)
    gap: float | None  # (objective - bound) / objective
    seconds: float
    model: ModelOutcome
    keep_all_seconds: float | None  # every op once on the home device (keep_all_seconds)
    home: str  # where sources, state and outputs live (planner.remat.configure.home_device)
    # the smallest replayed home peak the heuristics and the eviction runs saw, within the
    # budgets or not (planner.pipeline.infeasible names a budget from it when nothing fits)
    smallest_peak_bytes: int | None = None
    notes: tuple[str, ...] = ()
    # Other schedules within the budgets, fastest first: with lower peaks, they may lay out
    # within a budget the best one's arena overshoots (planner.pipeline tries them first).
    alternatives: tuple[Candidate, ...] = ()

    @property
    def schedule(self) -> Schedule | None:
        return self.best.schedule if self.best else None

    @property
    def stats(self) -> ScheduleStats | None:
        """The replayed schedule: peaks (aligned bytes), time."""
        return self.best.stats if self.best else None

    @property
    def objective_seconds(self) -> float | None:
        """Predicted time of `schedule` (compute + copies)."""
        return self.best.seconds if self.best else None

    @property
    def method(self) -> str:
        """"cpsat" or the heuristic whose schedule was kept."""
        return self.best.name if self.best else "none"


def plan_remat(
    graph: Graph, order: Sequence[int], budget_bytes: Mapping[str, int], costs: CostTable, *,
    time_limit: float = 30.0, workers: int = 1, seed: int = 0, memory_unit: int = 64,
    use_solver: bool = True, other_orders: Sequence[Sequence[int]] = (),
    bound_budgets: Mapping[str, int] | None = None,
) -> RematResult:
    """Best schedule within `budget_bytes` (per device) found in `time_limit` seconds.

    With one device, the eviction simulation's schedules (planner.remat.evict) come first; it
    tries `other_orders` (other topological orders of the graph, say the quick ones) when
    `order` gives it nothing. Heuristic schedules on the op-level problem, replayed against the
    true budgets, Checkmate's LP rounding on the chosen model, and the CP-SAT solution of that
    model (hinted with the best of them it can express; replayed too) join them; the fastest
    then drop the recomputations the budget can afford (planner.remat.fill), and the fastest
    replayed schedule that fits wins. Past LARGE_GRAPH_OPS ops (one device) no model is built:
    eviction, the fill pass and jittered restarts of both (_restarted) have the time. Without
    `use_solver` (feasibility probes) no LP, CP-SAT or fill runs. Status: OPTIMAL when it meets
    a lower bound valid for every schedule of the order (the crossing bound,
    planner.remat.bounds, or the model's own bound when the model is exact); INFEASIBLE when the
    exact model, the op-footprint bound or the crossing bound rules the budgets out (the
    crossing bound for `order` and every one of `other_orders`: the first it does not rule out
    takes `order`'s place); FEASIBLE or UNKNOWN otherwise. The reduced model's status and bound
    are reported beside (`model`).

    `bound_budgets`: the budgets the bound and status must hold for, when `budget_bytes` are
    targets set below them (planner.pipeline.fit: room for the layout's fragmentation). A
    bound at a target exceeds the fastest schedule within the budget (the 20,000-op chain's
    crossing bound: 112,904 at 20,000 B, 113,004 at 19,900 B), so it is taken at the budgets,
    the exact model's bound and its infeasibility proof (both at the targets) are left out, and
    a note names the targets.
    """
    started = time.perf_counter()
    shares = REMAT_SHARES
    keep_all = keep_all_seconds(graph, order, home_device(budget_bytes), costs)
    if len(budget_bytes) == 1 and next(iter(budget_bytes.values())) < order_lower_bound(graph):
        return _below_lower_bound(graph, budget_bytes, costs, started, keep_all)
    bounded = dict(budget_bytes if bound_budgets is None else bound_budgets)
    at_budgets = bounded == dict(budget_bytes)
    crossing = _crossing(graph, order, bounded, costs, memory_unit)
    bounded_orders = {tuple(order)}
    if crossing is not None and math.isinf(crossing.seconds):
        # Ruled out for this order: another may hold less that cannot be made again (GPT-2-small
        # at persistent + 50%: the order tuned for keeping everything is ruled out, the quick
        # order plans at 1.06x).
        for k, other in enumerate(other_orders):
            other_crossing = _crossing(graph, other, bounded, costs, memory_unit)
            if other_crossing is not None and not math.isinf(other_crossing.seconds):
                order, crossing = other, other_crossing
                other_orders = [*other_orders[:k], *other_orders[k + 1:]]
                break
        else:
            return _crossing_infeasible(bounded, costs, started, crossing, keep_all)
    asked = budget_bytes
    budget_bytes = modelled_devices(budget_bytes)
    extra: tuple[Reduction, ...] = ()
    if len(budget_bytes) < len(asked):
        extra = (Reduction("devices modelled", False, f"ops are placed on the {MODEL_DEVICES} "
                           "largest budgets (home first); the other devices stay empty"),)
    single = len(budget_bytes) == 1
    large = single and len(graph.ops) > LARGE_GRAPH_OPS
    evict_share = shares.evict_large if large else shares.evict
    eviction_orders = [order, *other_orders]
    evictions = (evict_candidates(graph, eviction_orders,
                                  *next(iter(budget_bytes.items())), costs,
                                  alignment=memory_unit,
                                  deadline=started + evict_share * time_limit)
                 if single else Evictions([], None))
    evicted = evictions.fitting
    if crossing is not None:
        # Schedules of other orders (or of deferred forms) count: the bound must hold for them.
        for source in source_orders(graph, [order, *other_orders], evicted):
            if source != list(order):
                bounded_orders.add(tuple(source))
                also = _crossing(graph, source, bounded, costs, memory_unit)
                if also is not None and also.seconds < crossing.seconds:
                    crossing = also
    if large:
        return _large(graph, eviction_orders, budget_bytes, costs, memory_unit, started,
                      time_limit, evictions, crossing, fill=use_solver, seed=seed,
                      notes=_target_notes(budget_bytes, bounded),
                      bounded=(bounded_orders, bounded), keep_all=keep_all)
    if evicted and evicted[0].name.endswith(LATE) and OTHER_ORDER not in evicted[0].name:
        # The order's deferred form evicts best: the stage model gets it too (ResNet-CIFAR at
        # persistent + 50%: the model of the order tuned for keeping everything found nothing,
        # that of its deferred form plans at 1.11x against eviction's 1.16x).
        order = deferred(graph, order)
    configured = configure(graph, order, costs, budget_bytes, memory_unit=memory_unit)
    problem = configured.problem
    exact = all(r.exact for r in problem.reductions)
    notes = list(_target_notes(budget_bytes, bounded))
    # The time limit is shared out (planner.time_budget.REMAT_SHARES): heuristics, then LP
    # rounding, then CP-SAT, then the fill pass, each up to a deadline.
    heuristics_share = shares.heuristics if use_solver else shares.heuristics_alone
    candidates, smallest = heuristic_candidates(
        configured.fine, budget_bytes, costs, deadline=started + heuristics_share * time_limit,
        last_resort=started + max(heuristics_share, shares.last_resort) * time_limit)
    if configured.fine is not problem:
        more, small2 = heuristic_candidates(problem, budget_bytes, costs, scan=(1.0,),
                                            actual=False,
                                            deadline=started + heuristics_share * time_limit)
        candidates = sorted(candidates + more, key=lambda c: c.seconds)
        if small2 is not None:
            smallest = small2 if smallest is None else min(smallest, small2)
    if evictions.smallest_peak is not None:
        smallest = min(evictions.smallest_peak, smallest or evictions.smallest_peak)
    if single:
        candidates += _chain_candidate(graph, budget_bytes, costs, memory_unit)
    candidates = sorted(candidates + evicted, key=lambda c: c.seconds)
    lp_left = started + shares.lp_rounding * time_limit - time.perf_counter()
    if use_solver and single and lp_left > 0:
        # Checkmate's LP rounding on the model's problem: another candidate, and a hint. Only
        # within its share: at half-second limits its model and LP took 0.6 s, more than the
        # whole request was given (bench/remat/small.md).
        lp = lp_rounding(problem, budget_bytes, costs, seed=seed, time_limit=lp_left)
        if lp.candidate is not None and lp.candidate.stats.fits(dict(budget_bytes)):
            candidates = sorted([*candidates, lp.candidate], key=lambda c: c.seconds)
    budget_units = {d: b // problem.memory_unit for d, b in budget_bytes.items()}
    solution = None
    remaining = shares.solver_until * time_limit - (time.perf_counter() - started)
    if use_solver and remaining < SOLVER_FLOOR_S:
        # Building the model alone takes longer (UNet-small: 1.5 s; given 0.2 s past its share,
        # the solver phase took 5.2 s of a 1.6 s limit).
        notes.append(f"no CP-SAT: {max(0.0, remaining):.2f} s of its share left")
    elif use_solver:
        solution = solve_problem(problem, budget_units, time_limit=remaining, workers=workers,
                                 seed=seed, memory=configured.memory,
                                 hint=_hint(problem, candidates, budget_units),
                                 use_heuristics=False)
        if solution.decision is not None:
            cp = replay(problem, solution.decision, costs, solution.method)
            if cp.stats.fits(dict(budget_bytes)):
                candidates = sorted([*candidates, cp], key=lambda c: c.seconds)
            else:
                notes.append("the model's schedule replays over budget (a bug): not used")
        notes.extend(solution.notes)
    if use_solver:
        candidates = _filled(graph, candidates, budget_bytes, costs, memory_unit,
                             deadline=started + time_limit)
    model_bound = (solution.bound * problem.time_unit
                   if solution is not None and solution.bound is not None else None)
    model = ModelOutcome(configured.tier, configured.memory, (*problem.reductions, *extra),
                         exact and not extra, solution.status if solution else None,
                         model_bound)
    lower = _held_by_best(graph, candidates, _lower_bound(
        costs, crossing, model_bound if exact and at_budgets else None),
        bounded_orders, bounded, costs, memory_unit)
    proven = solution is not None and solution.status == "INFEASIBLE" and exact and at_budgets
    return _result(candidates, lower, proven, model, keep_all, problem.home, smallest,
                   notes, started)


def _chain_candidate(graph: Graph, budget_bytes: Mapping[str, int], costs: CostTable,
                     memory_unit: int) -> list[Candidate]:
    """The chain DP's schedule where the graph is a chain (planner.remat.chain_dp: exact over
    the schedules that keep each checkpoint until its backward, which on chains the stage
    heuristics and eviction often miss by a few percent: bench/remat/small.md) small enough
    for the DP (chain_dp.chain_fits: at most about 0.3 s); nothing otherwise."""
    found = baselines.chain_dp(graph, budget_bytes, costs, memory_unit)
    if found.schedule is None or found.stats is None or not found.stats.fits(dict(budget_bytes)):
        return []
    return [Candidate("chain-dp", None, None, found.schedule, found.stats)]


def _result(candidates: Sequence[Candidate], lower: tuple[float, str],
            proven_infeasible: bool, model: ModelOutcome, keep_all: float | None, home: str,
            smallest: int | None, notes: Sequence[str], started: float) -> RematResult:
    """The fastest candidate, its status and gap against `lower` (a bound valid for every
    schedule of the order, and what it is), and the runners-up with lower peaks."""
    lower_seconds, bound_name = lower
    best = candidates[0] if candidates else None
    if best is None:
        status: SolverStatus = "INFEASIBLE" if proven_infeasible else "UNKNOWN"
        gap = None
    else:
        objective = best.seconds
        if lower_seconds - objective <= 1e-9 * lower_seconds:
            # The same op times summed in another order: equal up to rounding, never above.
            lower_seconds = min(lower_seconds, objective)
        gap = max(0.0, (objective - lower_seconds) / objective) if objective else 0.0
        status = "OPTIMAL" if gap <= 1e-9 else "FEASIBLE"
    return RematResult(
        best=best, status=status, bound_seconds=lower_seconds, bound_name=bound_name, gap=gap,
        seconds=time.perf_counter() - started, model=model,
        keep_all_seconds=keep_all, home=home,
        smallest_peak_bytes=smallest, notes=tuple(notes),
        alternatives=_lower_peaks(best, candidates[1:]),
    )


def _large(graph: Graph, orders: Sequence[Sequence[int]], budget_bytes: Mapping[str, int],
           costs: CostTable, memory_unit: int, started: float, time_limit: float,
           evictions: Evictions, crossing: CrossingBound | None, fill: bool, seed: int,
           notes: Sequence[str], bounded: tuple[set[tuple[int, ...]], Mapping[str, int]],
           keep_all: float | None) -> RematResult:
    """One device, past LARGE_GRAPH_OPS ops: the eviction schedules (of `orders`), the fill
    pass and the jittered restarts, no model (see LARGE_GRAPH_OPS)."""
    device = next(iter(budget_bytes))
    candidates = list(evictions.fitting)
    if fill:
        candidates = _filled(graph, candidates, budget_bytes, costs, memory_unit,
                             deadline=started + time_limit)
        candidates = _restarted(graph, orders, budget_bytes, costs, memory_unit, candidates,
                                seed, deadline=started + time_limit)
    model = _no_model(graph, device, "evict", f"past {LARGE_GRAPH_OPS} ops: the eviction "
                      "simulation (planner.remat.evict), the fill pass (planner.remat.fill) "
                      "and their jittered restarts alone")
    lower = _held_by_best(graph, candidates, _lower_bound(costs, crossing, None), *bounded,
                          costs, memory_unit)
    smallest = min((c.stats.peaks.get(device, 0) for c in candidates),
                   default=evictions.smallest_peak)
    return _result(candidates, lower, False, model, keep_all, device, smallest, notes,
                   started)


def result_of(graph: Graph, candidates: Sequence[Candidate], device: str, costs: CostTable,
              why: str) -> RematResult:
    """The result of schedules on one device found by searches run apart (planner.remat.smallest:
    the least peak the search reaches), fastest first, with the bound every schedule meets (each
    op once on its fastest device); `why` says where they come from."""
    started = time.perf_counter()
    ranked = sorted(candidates, key=lambda c: c.seconds)
    smallest = min((c.stats.peaks.get(device, 0) for c in ranked), default=None)
    model = _no_model(graph, device, "searched apart", why)
    keep_all = keep_all_seconds(graph, range(len(graph.ops)), device, costs)
    return _result(ranked, _lower_bound(costs, None, None), False, model, keep_all, device,
                   smallest, (), started)


def _no_model(graph: Graph, device: str, tier: str, why: str) -> ModelOutcome:
    """The model outcome of a result no model was solved for (`tier`: what made its schedules;
    `why`)."""
    reductions = (*base_reductions(graph, device), Reduction("no model solved", False, why))
    return ModelOutcome(tier, "replay", reductions, exact=False)


def keep_all_seconds(graph: Graph, order: Sequence[int], device: str, costs: CostTable
                     ) -> float | None:
    """Every op once on `device` in `order`, timed as the replay prices it (planner.memory
    .simulate: a run sharing an input's storage at its in-place time); None when some op cannot
    run there. Without in-place times, the plain sum (no replay)."""
    plain = costs.sequential_seconds(device)
    if plain is None or not costs.in_place_seconds:
        return plain
    return simulate(graph, sequential_schedule(graph, order, device), costs).seconds


def _lower_bound(costs: CostTable, crossing: CrossingBound | None, model_bound: float | None
                 ) -> tuple[float, str]:
    """The largest of the bounds that hold, and what it is (the report names it)."""
    bounds = [(costs.fastest_seconds(), ONCE_BOUND)]
    if crossing is not None:
        bounds.append((crossing.seconds, "the crossing bound (planner.remat.bounds: what the "
                       "budget forces at one step of the orders the schedules ran in)"))
    if model_bound is not None:
        bounds.append((model_bound, "the exact model's"))
    return max(bounds, key=lambda b: b[0])


def _held_by_best(graph: Graph, candidates: Sequence[Candidate], lower: tuple[float, str],
                  bounded_orders: set[tuple[int, ...]], budget_bytes: Mapping[str, int],
                  costs: CostTable, memory_unit: int) -> tuple[float, str]:
    """`lower`, or the crossing bound of the fastest candidate's own order where that is lower
    (`bounded_orders`: those `lower` was taken for). A bound taken for some orders holds for
    their schedules only, and the stage heuristics emit their model's stage order: on GPT-2-tiny
    at its keep-everything arena the eviction orders' crossing bound was 0.016% above the time
    of the keep-everything schedule the stage heuristics made."""
    best = min(candidates, key=lambda c: c.seconds, default=None)
    if best is None:
        return lower
    order = first_computations(best.schedule)
    if tuple(order) in bounded_orders:
        return lower
    own = _lower_bound(costs, _crossing(graph, order, budget_bytes, costs, memory_unit), None)
    return min(lower, own, key=lambda b: b[0])


def _target_notes(targets: Mapping[str, int], budgets: Mapping[str, int]) -> tuple[str, ...]:
    """What a result aimed below the budgets says (see plan_remat's `bound_budgets`)."""
    lowered = {d: t for d, t in targets.items() if t != budgets.get(d, t)}
    if not lowered:
        return ()
    return ("schedules kept within " + ", ".join(
        f"{d}={t} B of {budgets[d]} B" for d, t in lowered.items())
        + " (room for the arena's fragmentation); the bound and status hold for the budgets",)


def modelled_devices(budget_bytes: Mapping[str, int]) -> dict[str, int]:
    """The budgets the model places ops on: all of them up to MODEL_DEVICES, else the home
    device and the next largest budgets (the model grows with the square of the devices: copy
    literals per pair)."""
    ranked = sorted(budget_bytes, key=lambda d: (d != home_device(budget_bytes),
                                                 -budget_bytes[d], d))
    return {d: budget_bytes[d] for d in ranked[:MODEL_DEVICES]}


def _crossing(graph: Graph, order: Sequence[int], budget_bytes: Mapping[str, int],
              costs: CostTable, memory_unit: int) -> CrossingBound | None:
    """The crossing bound (planner.remat.bounds) with one device; None with several (a value
    may then move to another device instead of being made again)."""
    if len(budget_bytes) != 1:
        return None
    device, budget = next(iter(budget_bytes.items()))
    return crossing_bound(graph, order, device, budget, costs, alignment=memory_unit)


def _filled(graph: Graph, candidates: Sequence[Candidate], budget_bytes: Mapping[str, int],
            costs: CostTable, memory_unit: int, deadline: float) -> list[Candidate]:
    """The FILLED fastest candidates that recompute, with the recomputations the budget can
    afford dropped (planner.remat.fill), each given an equal share of the time left to start
    rounds in; then the source of the fastest result filled again to FILL_MARGINS below the
    budget: filled right up to it, a schedule leaves the layout no room to fragment, and a
    runner-up a little slower then beats one much slower (planner.pipeline.fit). The fastest
    candidate is filled to the first margin first and that schedule on to the budget, so that a
    search with time for a round or two has a schedule with room too (GPT-2-small at persistent
    + half its activations, 5 s: one round filled the best to 99.95% of the budget, its layout
    overshot by 0.5%, and the runner-up laid out instead was unfilled, 1.27x as slow). No fill
    starts once a round, as long as the last one took, would end past the deadline (GPT-2-small's
    rounds take 0.15-0.3 s). All candidates, fastest first."""
    out = list(candidates)
    sources = _by_family([c for c in candidates if c.stats.recomputes])[:FILLED]
    margins = [(1 - m, f"fill-{m:g}") for m in FILL_MARGINS]
    pace = Pace()

    def fill(candidate: Candidate, share: float, label: str, parts: int,
             start: Candidate | None = None) -> Candidate | None:
        now = time.perf_counter()
        return _fill(graph, candidate, budget_bytes, share, label, costs, memory_unit,
                     (now + (deadline - now) / parts, deadline), pace, start)

    best: tuple[float, Candidate] | None = None
    for k, candidate in enumerate(sources):
        if not pace.round_fits(deadline):
            break
        parts = len(sources) + len(margins) - k
        roomy = fill(candidate, *margins[0], parts + 1) if k == 0 else None
        filled = (fill(candidate, 1.0, "fill", parts, start=roomy)
                  if pace.round_fits(deadline) else None)
        result = filled or roomy or candidate
        if best is None or result.seconds < best[0]:
            best = (result.seconds, candidate)
        out.extend(c for c in (roomy, filled) if c)
    for k, (share, label) in enumerate(margins if best else ()):
        if best is None or not pace.round_fits(deadline):
            break
        if k == 0 and best[1] is sources[0]:
            continue  # filled to this margin on its way to the budget
        filled = fill(best[1], share, label, len(margins) - k)
        out.extend([filled] if filled else [])
    return sorted(out, key=lambda c: c.seconds)


def _restarted(graph: Graph, orders: Sequence[Sequence[int]], budget_bytes: Mapping[str, int],
               costs: CostTable, memory_unit: int, candidates: Sequence[Candidate], seed: int,
               deadline: float) -> list[Candidate]:
    """`candidates` (filled, fastest first) and those of restarts of the eviction simulation on
    `orders` with its victims' scores jittered (planner.remat.evict.evict_schedule; drawn from
    `seed` and the restart's number, which the names carry: `evict~3@0.98+fill`), each
    restart's fits filled (_filled), all fastest first. The rules' own choices are fixed, and
    the fill pass ends wherever their schedule leads it; jittered, they reach faster schedules
    (ResNet-18-narrow at persistent + 30% of its activations, filled: 1.289x the
    keep-everything step in 2 of 12 restarts, 1.369x unjittered; UNet-Adam 1.301x for 1.318x;
    MobileNetV2 nothing faster). A restart starts while the time left to `deadline` covers the
    last one's, its eviction given half of that time, and restarts stop after
    STALLED_RESTARTS in a row that found nothing RESTART_GAIN faster than the fastest so far."""
    (device, budget), = budget_bytes.items()
    out = list(candidates)
    fastest = min((c.seconds for c in out), default=math.inf)
    last, stalled, number = 0.0, 0, 0
    while stalled < STALLED_RESTARTS and time.perf_counter() + last < deadline:
        number += 1
        began = time.perf_counter()
        found = evict_candidates(graph, orders, device, budget, costs, alignment=memory_unit,
                                 deadline=began + (deadline - began) / 2,
                                 jitter=np.random.default_rng([seed, number]))
        fits = [replace(c, name=c.name.replace("@", f"~{number}@", 1)) for c in found.fitting]
        filled = _filled(graph, fits, budget_bytes, costs, memory_unit, deadline)
        out.extend(filled)
        best = min((c.seconds for c in filled), default=math.inf)
        stalled = 0 if best < (1 - RESTART_GAIN) * fastest else stalled + 1
        fastest = min(fastest, best)
        last = time.perf_counter() - began
    return sorted(out, key=lambda c: c.seconds)


def _by_family(candidates: Sequence[Candidate]) -> list[Candidate]:
    """`candidates` (fastest first) with the fastest of each family (the name before its "@":
    one eviction rule and scope, one heuristic) first, then the second fastest of each, and so
    on. A fast schedule of one family often fills worse than a slower one of another, whose
    recomputations sit where dropping them buys more (unet_small at persistent + 50%: the own-
    cost rule's five fastest filled to 1.11x, the neighbourhood rule's 0.85 factor to 1.08x)."""
    families: dict[str, list[Candidate]] = {}
    for c in candidates:
        families.setdefault(c.name.split("@")[0], []).append(c)
    rounds = zip_longest(*families.values())
    return [c for round_ in rounds for c in round_ if c is not None]


def _fill(graph: Graph, candidate: Candidate, budget_bytes: Mapping[str, int], share: float,
          label: str, costs: CostTable, memory_unit: int, until: tuple[float, float],
          pace: Pace, start: Candidate | None = None) -> Candidate | None:
    """`candidate` filled to `share` of the budgets, named after it, going on from `start` (its
    schedule filled part of the way) when given; None when it does not fit there or nothing
    could be dropped. `until`: fill_budget's (start_by, deadline)."""
    target = {d: int(b * share) for d, b in budget_bytes.items()}
    origin = start or candidate
    if not origin.stats.fits(target):
        return None
    start_by, deadline = until
    filled = fill_budget(graph, origin.schedule, origin.stats, target, costs,
                         alignment=memory_unit, deadline=deadline, start_by=start_by,
                         pace=pace)
    if not filled.dropped:
        return None
    return replace(candidate, name=f"{candidate.name}+{label}", schedule=filled.schedule,
                   stats=filled.stats)


def _hint(problem: RematProblem, candidates: Sequence[Candidate],
          budget_units: Mapping[str, int]) -> Decision | None:
    """The fastest candidate's decision the model can take as a hint: one made on the model's
    own problem that fits the model's budgets."""
    for candidate in candidates:
        decision = candidate.decision
        if candidate.problem is problem and decision is not None \
                and evaluate(problem, decision).fits(budget_units):
            return decision
    return None


def _lower_peaks(best: Candidate | None, others: Sequence[Candidate]) -> tuple[Candidate, ...]:
    """Up to ALTERNATIVES of `others` (fastest first) whose peaks are all below `best`'s, each
    schedule once (a filled schedule can equal another candidate; one laid out twice is time
    lost)."""
    if best is None:
        return ()
    lower: list[Candidate] = []
    for c in others:
        if len(lower) == ALTERNATIVES:
            break
        if all(c.stats.peaks.get(d, 0) < peak for d, peak in best.stats.peaks.items()) and \
                not any(c.schedule is o.schedule or (c.seconds == o.seconds
                                                     and c.schedule == o.schedule)
                        for o in lower):
            lower.append(c)
    return tuple(lower)


def _below_lower_bound(graph: Graph, budget_bytes: Mapping[str, int], costs: CostTable,
                       started: float, keep_all: float | None) -> RematResult:
    """A single budget under the op-footprint bound: proven infeasible without solving."""
    device, budget = next(iter(budget_bytes.items()))
    return _proven_infeasible(device, costs, started, keep_all, (
        f"{device}: {budget} B is below {order_lower_bound(graph)} B, which some step needs "
        f"whatever the order or recomputation ({lower_bound_reason(graph)})"))


def _crossing_infeasible(budget_bytes: Mapping[str, int], costs: CostTable, started: float,
                         crossing: CrossingBound, keep_all: float | None) -> RematResult:
    """A single budget that some step cannot meet even dropping every value that can be made
    again (planner.remat.bounds): proven infeasible for this order without solving."""
    device, budget = next(iter(budget_bytes.items()))
    return _proven_infeasible(device, costs, started, keep_all, (
        f"{device}: {budget} B cannot hold what step {crossing.step} of the order needs even "
        "with every value that can be made again dropped (data inputs, graph outputs and "
        "random ops' values cannot)"))


def _proven_infeasible(device: str, costs: CostTable, started: float, keep_all: float | None,
                       why: str) -> RematResult:
    return RematResult(
        best=None, status="INFEASIBLE", bound_seconds=costs.fastest_seconds(),
        bound_name=ONCE_BOUND, gap=None,
        seconds=time.perf_counter() - started,
        model=ModelOutcome(tier="none", memory_model="none", reductions=(), exact=True),
        keep_all_seconds=keep_all, home=device, notes=(why,),
    )


@dataclass(frozen=True)
class PeakResult:
    schedule: Schedule | None
    peak_bytes: int | None  # the replayed schedule's peak (aligned)
    model_bound_bytes: int | None  # lower bound on the reduced model's smallest peak
    status: str
    seconds: float
    tier: str


def smallest_peak(graph: Graph, order: Sequence[int], device: str, costs: CostTable, *,
                  time_limit: float = 30.0, workers: int = 1, seed: int = 0,
                  memory_unit: int = 64, hint_budget: int | None = None) -> PeakResult:
    """The smallest peak on `device` this planner reaches (min-budget's "achieved")."""
    started = time.perf_counter()
    budget = hint_budget or sum(t.nbytes for t in graph.tensors) * 2
    configured = configure(graph, order, costs, {device: budget}, memory_unit=memory_unit)
    problem = configured.problem
    result = minimize_peak(problem, device, time_limit=max(0.5, time_limit - (
        time.perf_counter() - started)), workers=workers, seed=seed, memory=configured.memory)
    schedule = peak = None
    if result.decision is not None:
        schedule = emit_schedule(problem, result.decision)
        peak = simulate(graph, schedule, costs, alignment=problem.memory_unit).peaks[device]
    bound = result.bound * problem.memory_unit if result.bound is not None else None
    return PeakResult(schedule, peak, bound, result.status, time.perf_counter() - started,
                      configured.tier)
