"""Checkmate's approximation: LP relaxation at 0.9x the budget, rounding of S, best R for it.

Jain et al. (2020, section 5) solve the relaxed MILP, round the save matrix S, and then recompute
whatever that S leaves missing. Here: the same model as the CP-SAT solver (planner.remat.model),
relaxed and solved with GLOP (no CP-SAT involved) at 0.9x the budget (at 1x when that has no
solution); S rounded at 0.5 and at a few random
thresholds; for each rounding, a stage-by-stage pass keeps what S keeps and recomputes, just in
time and recursively, every value a computation reads that is not resident (where the problem
allows it); the cheapest decision whose replayed schedule fits the true budget wins (when none
fits, the one with the lowest replayed peak is returned, marked as not fitting).
"""

from __future__ import annotations

import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from planner.profile.costs import CostTable
from planner.remat.constraints import build_model
from planner.remat.decision import Decision
from planner.remat.heuristics import Candidate, replay
from planner.remat.linear import solve_lp
from planner.remat.model import ONE, RematModel
from planner.remat.problem import RematProblem


@dataclass(frozen=True)
class LpRoundingResult:
    candidate: Candidate | None
    lp_status: str
    lp_objective_seconds: float | None  # the relaxation's value at 0.9x budget
    seconds: float
    tried: int


def lp_rounding(problem: RematProblem, budget_bytes: Mapping[str, int], costs: CostTable, *,
                factors: tuple[float, ...] = (0.9, 1.0), samples: int = 8, seed: int = 0,
                time_limit: float = 60.0) -> LpRoundingResult:
    """Single-device Checkmate approximation on the home device. The LP is
    solved at 0.9x the budget (Checkmate's choice); when that relaxation is infeasible or no
    rounding fits, at the budget itself."""
    started = time.perf_counter()
    deadline = started + time_limit
    result = LpRoundingResult(None, "NOT_SOLVED", None, 0.0, 0)
    for k, factor in enumerate(factors):
        left = deadline - time.perf_counter()
        # A second LP (model build + solve) costs about what the first did: skip it when the
        # time left would not cover that.
        if left <= 0 or (k and left < time.perf_counter() - started):
            break
        result = _at(problem, budget_bytes, costs, factor, samples, seed, deadline, started)
        if result.candidate is not None and result.candidate.stats.fits(dict(budget_bytes)):
            break
    return result


def _at(problem: RematProblem, budget_bytes: Mapping[str, int], costs: CostTable, factor: float,
        samples: int, seed: int, deadline: float, started: float) -> LpRoundingResult:
    device = problem.home
    units = {d: int(b * factor) // problem.memory_unit for d, b in budget_bytes.items()}
    model = build_model(RematModel(problem, "stage", "time", units))
    label = f"at {factor:g}x"
    if model.infeasible:
        return LpRoundingResult(None, f"INFEASIBLE {label}", None,
                                time.perf_counter() - started, 0)
    lp = solve_lp(model.lm, time_limit=max(0.0, deadline - time.perf_counter()))
    if lp.values is None or lp.objective is None:  # solve_lp sets both or neither
        return LpRoundingResult(None, f"{lp.status} {label}", None,
                                time.perf_counter() - started, 0)
    rng = random.Random(seed)
    thresholds = [0.5] + [rng.random() for _ in range(max(0, samples - 1))]
    best: Candidate | None = None
    tried = 0

    def rank(c: Candidate) -> tuple:
        fits = c.stats.fits(dict(budget_bytes))
        return (not fits, c.seconds if fits else c.stats.peaks.get(device, 0))

    for threshold in thresholds:
        if best is not None and time.perf_counter() > deadline:
            break
        decision = _recompute_for(problem, model, lp.values, threshold, device)
        if decision is None:
            continue
        tried += 1
        candidate = replay(problem, decision, costs, f"lp-round@{threshold:.2f}")
        if best is None or rank(candidate) < rank(best):
            best = candidate
    return LpRoundingResult(best, f"{lp.status} {label}", lp.objective * problem.time_unit,
                            time.perf_counter() - started, tried)


def _recompute_for(problem: RematProblem, model: RematModel, values: Sequence[float],
                   threshold: float, device: str) -> Decision | None:
    """Keep what the rounded S keeps; recompute just in time whatever is missing."""
    p = problem
    persistent = {v.id for v in p.values if v.kind == "persistent" and device == p.home}

    def saved(t: int, v: int) -> bool:
        entry = model.s(device, t, v)
        if entry is None:
            return False
        return entry is ONE or values[entry] >= threshold

    allowed = [set(n.recompute_stages) for n in p.nodes]
    resident = {v.id for v in p.values if v.producer is None and v.id not in persistent}
    computes: list[list[tuple[int, str]]] = []
    for t in range(p.stages):
        stage: set[int] = {t}
        made: set[int] = set(p.nodes[t].values)
        have = resident | made | persistent
        if not all(_ensure(p, u, t, allowed, have, stage, made) for u in p.nodes[t].reads):
            return None
        computes.append([(k, device) for k in sorted(stage)])
        resident = {v for v in resident | made
                    if v in persistent or saved(t + 1, v) or not _droppable(p, v, t, allowed)}
    return Decision(computes)


def _ensure(p: RematProblem, v: int, t: int, allowed: list[set[int]], have: set[int],
            stage: set[int], made: set[int]) -> bool:
    if v in have or v in made:
        return True
    producer = p.values[v].producer
    if producer is None or t not in allowed[producer]:
        return False
    unit = p.nodes[producer].unit
    block = p.units[unit] if unit is not None else (producer,)
    stage.update(block)
    for k in block:
        made.update(p.nodes[k].values)
    return all(_ensure(p, u, t, allowed, have, stage, made) for k in block
               for u in p.nodes[k].reads)


def _droppable(p: RematProblem, v: int, t: int, allowed: list[set[int]]) -> bool:
    """v may be dropped after stage t: nothing can read it later, or it can be recomputed
    wherever a first computation reads it (values nobody can recompute stay to their last
    possible read)."""
    value = p.values[v]
    if value.kind == "output":
        return False
    producer = value.producer
    if producer is None or not p.nodes[producer].recomputable:
        return t >= value.last_read
    return all(c in allowed[producer] for c in value.consumers if c > t)
