"""Heuristic schedules judged by what they really need: replayed, not modelled.

The model (planner.remat.constraints) counts memory conservatively, and on coarse problems it can
rule out schedules that fit. The executor's policies (planner.remat.policies) run here at a scan
of budgets from the true budget upwards, counting each stage as a replay would (`actual`); each
decision is emitted as a schedule and replayed (planner.memory.simulate), and kept when its
replayed peak fits the true budget. The
cheapest that fits is a valid answer on its own and a fallback for the CP-SAT search.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from planner.memory.schedule import Schedule
from planner.memory.simulate import ScheduleStats, simulate
from planner.profile.costs import CostTable
from planner.remat.decision import Decision
from planner.remat.emit import emit_schedule
from planner.remat.policies import (
    ExecutionResult,
    Policy,
    execute,
    sqrt_checkpoints,
    threshold_checkpoints,
)
from planner.remat.problem import RematProblem

# (policy, checkpoint share, budget factor) runs, in rounds: every policy at the true budget
# first, then each at budgets slightly below and above it. The executor's greedy choices are not
# monotone in the budget, so a decision made for a slightly smaller or larger budget often
# replays within the true one where the true budget's run dead-ends; rounds make sure a short
# time limit still tries every policy once before any factor is tried twice.
POLICIES: tuple[tuple[Policy, float | None], ...] = (
    ("greedy", None), ("hybrid", 0.25), ("hybrid", 0.1), ("hybrid", 0.05),
)
FACTORS = (1.0, 0.95, 1.05, 0.9, 1.1, 0.975, 0.85, 1.25, 0.925, 1.5)
RUNS = tuple((policy, share, factor) for factor in FACTORS for policy, share in POLICIES)
# The policies tried at each factor of a given `scan`.
SCAN_POLICIES: tuple[tuple[Policy, float | None], ...] = (("greedy", None), ("hybrid", 0.25))


@dataclass(frozen=True)
class Candidate:
    """A replayed schedule; `problem` and `decision` where a stage-model search made it (None
    for the op-level ones: planner.remat.evict, planner.remat.fill)."""

    name: str
    problem: RematProblem | None
    decision: Decision | None
    schedule: Schedule
    stats: ScheduleStats

    @property
    def seconds(self) -> float:
        return self.stats.seconds or 0.0


def replay(problem: RematProblem, decision: Decision, costs: CostTable, name: str) -> Candidate:
    schedule = emit_schedule(problem, decision)
    stats = simulate(problem.graph, schedule, costs, alignment=problem.memory_unit)
    return Candidate(name, problem, decision, schedule, stats)


def _runs(problem: RematProblem, device: str, budget_units: int, scan: Iterable[float] | None,
          actual: bool) -> list[tuple[str, Callable[[], ExecutionResult]]]:
    """The runs, most promising first: the policies at the true budget, then Chen's sqrt(n)
    and keep-everything (the baselines the planner must never lose to), then the other budget
    factors. Each is a thunk, so that a deadline can stop before the next one starts."""
    total = sum(problem.values[v].size for n in problem.nodes if n.recomputable
                for v in n.values)
    runs = RUNS if scan is None else [(p, s, f) for f in scan for p, s in SCAN_POLICIES]
    first_round = len(POLICIES) if scan is None else len(SCAN_POLICIES)

    def policy_run(policy: Policy, share: float | None, factor: float
                   ) -> Callable[[], ExecutionResult]:
        marks = threshold_checkpoints(problem, int(total * share)) if share else ()
        return lambda: execute(problem, device, policy, budget=int(budget_units * factor),
                               checkpoints=marks, actual=actual)

    named = [(f"{policy}{share or ''}@{factor:g}", policy_run(policy, share, factor))
             for policy, share, factor in runs]
    baselines: list[tuple[str, Callable[[], ExecutionResult]]] = [
        ("sqrt", lambda: execute(problem, device, "checkpoints",
                                 checkpoints=sqrt_checkpoints(problem))),
        ("keep", lambda: execute(problem, device, "keep")),
    ]
    return named[:first_round] + baselines + named[first_round:]


def heuristic_candidates(
    problem: RematProblem, budget_bytes: Mapping[str, int], costs: CostTable, *,
    scan: Iterable[float] | None = None, deadline: float | None = None,
    last_resort: float | None = None, actual: bool = True,
) -> tuple[list[Candidate], int | None]:
    """(single-device candidates whose replayed peak fits `budget_bytes`, cheapest first;
    the smallest replayed peak seen on the home device, fitting or not).

    Runs stop at `deadline` once one of them fits, and at `last_resort` (default: `deadline`)
    in any case; the first run always completes."""
    fitting: list[Candidate] = []
    smallest: int | None = None
    seen: set[tuple] = set()
    device = problem.home  # the executor keeps sources where they live
    if any(device not in n.cost for n in problem.nodes):
        return fitting, smallest
    units = budget_bytes[device] // problem.memory_unit
    stop = last_resort if last_resort is not None else deadline
    for k, (name, run) in enumerate(_runs(problem, device, units, scan, actual)):
        now = time.perf_counter()
        if k and ((deadline is not None and now > deadline and fitting)
                  or (stop is not None and now > stop)):
            break
        result = run()
        if result.decision is None:
            continue
        key = tuple(tuple(c) for c in result.decision.computes)
        if key in seen:
            continue
        seen.add(key)
        candidate = replay(problem, result.decision, costs, f"{name}@{device}")
        peak = candidate.stats.peaks.get(device, 0)
        smallest = peak if smallest is None else min(smallest, peak)
        if candidate.stats.fits(dict(budget_bytes)):
            fitting.append(candidate)
    fitting.sort(key=lambda c: c.seconds)
    return fitting, smallest
