"""Inverse queries (CalcGraph, Checkmate): the smallest budget, the largest batch.

- `min_budget`: the smallest budget on one device for which the planner returns a validated
  plan ("achieved"), next to a proven lower bound no plan can beat (the op-footprint bound of
  planner.memory.liveness: state, constants and one op's inputs and outputs at once) and the
  keep-everything arena. The achieved value starts from the least peak the remat search reaches
  (planner.remat.smallest: a bisection between that bound and the smallest peak known to fit,
  keep-everything's or CP-SAT's min-peak model's, each probe decided by the search without a
  solver); the full planner then confirms it, a little higher when the layout's fragmentation
  needs it.
- `max_batch`: the largest value of a symbolic dim (the batch) whose plan fits the budgets, by
  doubling then bisection over `plan_model` with that dim bound (CalcGraph's search), within the
  request's time limit in all.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import onnx

from planner.errors import InfeasibleError, InvalidInputError
from planner.ir.graph import Graph
from planner.ir.onnx_model import read_model_bytes
from planner.memory.liveness import order_lower_bound
from planner.order import optimize_order
from planner.pipeline import plan_graph, plan_model
from planner.profile.costs import costs_from_profile
from planner.profile.for_request import profile_for
from planner.remat.rematerialize import smallest_peak
from planner.remat.smallest import least_peak
from planner.time_budget import MAX_BATCH_PROBE_SHARE, TimeBudget
from planner.time_budget import MIN_BUDGET_SHARES as SHARES
from schemas.plan import Plan, PlanRequest
from schemas.profile import Profile


@dataclass(frozen=True)
class MinBudget:
    device: str
    lower_bound: int  # bytes: no plan fits below (proven)
    achieved: int  # bytes: the arena of a validated plan made for that budget
    keep_all_arena: int  # bytes: arena of the plan without recomputation
    plan: Plan
    seconds: float


def min_budget(graph: Graph, device: str, *, profile: Profile | None = None,
               time_limit: float = 60.0,
               workers: int = 1, seed: int = 0, alignment: int = 64,
               plan: Callable[[Graph, PlanRequest], Plan] | None = None,
               started: float | None = None) -> MinBudget:
    """See the module doc. Time (planner.time_budget.MinBudgetShares), shares of what is left
    of `time_limit` when this call starts (`started`: when the query's clock started,
    perf_counter, if before this call: the CLI's reading of the model counts): without
    `profile`, measuring one (cached) within its share, ops not measured by then estimated; a
    tenth for keeping everything, up to a fifth for CP-SAT's min-peak model, the bisection until
    60% of it, the rest for confirming plans (the first confirmation runs even when the
    bisection has used it all: no answer is worse; the next ones get what is left). Every plan
    it makes is priced with that one profile."""
    entered = time.perf_counter()
    clock = TimeBudget(time_limit, started=entered if started is None else started)
    usable = max(0.0, time_limit - clock.elapsed())

    def since_entered() -> float:
        return time.perf_counter() - entered

    plan = plan or (lambda g, r: plan_graph(g, r))
    lower = order_lower_bound(graph)
    base = PlanRequest(budgets={device: 1 << 50},
                       time_limit_s=max(SHARES.keep_all_floor_s, usable * SHARES.keep_all),
                       workers=workers, seed=seed, alignment=alignment, profile=profile,
                       graph_optimization=graph.optimized.level if graph.optimized else "disable")
    # Measured once, within its share: unbounded, GPT-2-small's first query (empty profile
    # cache) spent 53 s profiling at --time-limit 10, then answered the keep-everything arena.
    profile = profile or profile_for(graph, base, lambda *_: None,
                                     time_limit_s=usable * SHARES.profile)
    base = base.model_copy(update={"profile": profile})
    keep_all = plan(graph, base)
    keep_arena = keep_all.devices[0].arena_bytes
    order = optimize_order(graph, time_limit=max(1.0, usable * SHARES.order),
                           workers=workers, seed=seed)
    costs = costs_from_profile(profile, graph, [device])
    upper = keep_arena
    if len(graph.ops) <= MIN_PEAK_MODEL_OPS:
        peak = smallest_peak(graph, order.order, device, costs,
                             time_limit=usable * SHARES.min_peak,
                             workers=workers, seed=seed, memory_unit=alignment,
                             hint_budget=keep_arena)
        if peak.peak_bytes is not None:
            upper = min(upper, peak.peak_bytes)
    least = least_peak(graph, order.order, device, costs, lower, upper,
                       memory_unit=alignment, other_orders=order.alternatives,
                       time_limit=max(0.0, SHARES.bisection_until * usable - since_entered()))
    # The full planner confirms, from the least peak any probe replayed (with a solver and more
    # time it may meet one the probes' runs replayed past their targets), then the peak of the
    # bisection's schedule (kept for the planner, planner.remat.remembered: it lays that out
    # when its own search finds nothing) or a smaller budget a refusal names as met, then at
    # most 3% up. Aiming a second time between the two cost UNet-small at 10 s its answer: two
    # confirmations found nothing, and the query answered the keep-everything arena.
    known = max(lower, least.budget)
    budget = max(lower, min(least.budget, least.replayed or least.budget))
    best = keep_all
    met: int | None = None  # the least budget a refusal named as met (a plan it laid out)
    last_try = False
    for attempt in range(6):
        left = time_limit - clock.elapsed()
        if budget >= keep_arena:
            break
        if attempt and left <= 0:
            if last_try or met is None or met >= keep_arena:
                break
            # Out of time after refusals: the budget one named is met by the schedule it laid
            # out (kept, planner.remat.remembered), not the keep-everything arena (UNet-Adam as
            # sent: 57.0 MB named twice, 151.4 MB answered). One last request, at a phase's
            # floor.
            budget, left, last_try = met, clock.floor(), True
        # the first confirmation runs whatever the bisection left; the others within the limit
        limit_s = max(SHARES.confirm_at_least * usable, left / 2) if not attempt else left
        request = base.model_copy(update={"budgets": {device: budget}, "time_limit_s": limit_s})
        try:
            best = plan(graph, request)
            break
        except InfeasibleError as exc:
            named = exc.smallest_feasible if exc.smallest_feasible and not exc.is_lower_bound \
                else None
            if named is not None:
                met = named if met is None else min(met, named)
            if budget < known:
                budget = min(known, named or known)
            else:
                budget = max(budget + alignment, min(named or budget, int(budget * 1.03)))
    return MinBudget(device, lower, best.devices[0].arena_bytes, keep_arena, best,
                     clock.elapsed())


# Graphs up to this many ops also try CP-SAT's min-peak model (beyond it, it finds nothing the
# heuristics do not in the time a query has).
MIN_PEAK_MODEL_OPS = 300


@dataclass(frozen=True)
class MaxBatch:
    dim: str
    value: int  # largest feasible value found (0: not even 1 fits)
    tried: dict[int, bool]
    plan: Plan | None
    complete: bool = True  # False: the time ran out first (a larger value may fit)


def symbolic_dims(model: str | Path | bytes) -> set[str]:
    proto = onnx.load_model_from_string(read_model_bytes(model))
    names = set()
    for value in [*proto.graph.input, *proto.graph.output, *proto.graph.value_info]:
        for dim in value.type.tensor_type.shape.dim:
            if dim.dim_param:
                names.add(dim.dim_param)
    return names


def max_batch(model: str | Path | bytes, request: PlanRequest, dim: str = "batch", *,
              limit: int = 1 << 16,
              plan: Callable[[str | Path | bytes, PlanRequest], Plan] | None = None,
              started: float | None = None) -> MaxBatch:
    """Largest `dim` in [1, limit] whose plan fits `request.budgets`: doubling, then bisection,
    all within `request.time_limit_s` from `started` (perf_counter; now by default). Each probe
    is a whole request (loading, profiling the new shapes, planning) given
    MAX_BATCH_PROBE_SHARE of the time left, at least a phase's floor (TimeBudget); once the time
    is spent no probe starts after the first, and the answer is the largest value that fit so
    far (`complete` False). Each probe used to get the whole limit: a search of 15 probes took
    15 times it."""
    if dim not in symbolic_dims(model):
        raise InvalidInputError(f"the model has no symbolic dim '{dim}' to search over; name "
                                "one with --dim-name (its inputs' shapes give the names)")
    plan = plan or plan_model
    clock = TimeBudget(request.time_limit_s,
                       started=time.perf_counter() if started is None else started)
    tried: dict[int, bool] = {}
    plans: dict[int, Plan] = {}

    def fits(value: int) -> bool | None:
        """Whether a plan fits at `value`; None when the time is spent (none tried)."""
        if value not in tried:
            if tried and clock.spent():
                return None
            left = clock.usable() - clock.elapsed()
            request_b = replace_dims(request, dim, value).model_copy(
                update={"time_limit_s": max(clock.floor(), MAX_BATCH_PROBE_SHARE * left)})
            try:
                plans[value] = plan(model, request_b)
                tried[value] = True
            except InfeasibleError:
                tried[value] = False
        return tried[value]

    if not fits(1):
        return MaxBatch(dim, 0, tried, None)
    good, bad = 1, None
    while bad is None:
        nxt = good * 2
        if nxt > limit:
            break
        found = fits(nxt)
        if found is None:
            return MaxBatch(dim, good, tried, plans[good], complete=False)
        if found:
            good = nxt
        else:
            bad = nxt
    if bad is None:
        return MaxBatch(dim, good, tried, plans[good])
    while bad - good > 1:
        mid = (good + bad) // 2
        found = fits(mid)
        if found is None:
            return MaxBatch(dim, good, tried, plans[good], complete=False)
        if found:
            good = mid
        else:
            bad = mid
    return MaxBatch(dim, good, tried, plans[good])


def replace_dims(request: PlanRequest, dim: str, value: int) -> PlanRequest:
    return request.model_copy(update={"dims": {**request.dims, dim: value}})



