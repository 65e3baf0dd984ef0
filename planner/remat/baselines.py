"""The baselines our solver is measured against, all producing a `Schedule` for the same graph.

- `keep_all`: every op once in the order, each value freed after its last read
  (planner.memory.schedule.sequential_schedule): the no-recomputation reference;
- `chen_sqrt`: Chen et al. (2016) segment checkpointing: every round(sqrt(n))-th recomputable op
  keeps its outputs, the rest are dropped after the forward pass and recomputed when the backward
  needs them (on the op-level problem);
- `greedy`: a budget-driven eviction heuristic (largest x farthest / cheapest to recompute first,
  DTR-like; planner.remat.policies) at the budget, on the op-level problem;
- `checkmate_lp`: Checkmate's LP relaxation at 0.9x the budget + rounding
  (planner.remat.lp_rounding);
- `chain_dp`: the exact chain DP (planner.remat.chain_dp), for graphs that are linear chains.

Each returns a `BaselineResult`: the schedule (None when the baseline finds nothing that fits),
its replayed peak and time, and how long the baseline took. Plans are built and validated the
same way as the solver's (bench/remat).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from planner.ir.graph import Graph
from planner.memory.schedule import Schedule, sequential_schedule
from planner.memory.simulate import ScheduleStats, simulate
from planner.profile.costs import CostTable
from planner.remat.chain_dp import chain_fits, chain_schedule, find_chain, solve_chain
from planner.remat.heuristics import replay
from planner.remat.lp_rounding import lp_rounding
from planner.remat.policies import ExecutionResult, execute, sqrt_checkpoints
from planner.remat.problem import RematProblem


@dataclass(frozen=True)
class BaselineResult:
    name: str
    schedule: Schedule | None
    stats: ScheduleStats | None
    seconds: float
    note: str = ""

    def fits(self, budget_bytes: Mapping[str, int]) -> bool:
        return self.stats is not None and self.stats.fits(dict(budget_bytes))


def keep_all(graph: Graph, order: Sequence[int], device: str, costs: CostTable,
             alignment: int = 64) -> BaselineResult:
    started = time.perf_counter()
    schedule = sequential_schedule(graph, order, device)
    return BaselineResult("keep-all", schedule, simulate(graph, schedule, costs, alignment),
                          time.perf_counter() - started)


def chen_sqrt(problem: RematProblem, costs: CostTable) -> BaselineResult:
    started = time.perf_counter()
    result = execute(problem, problem.home, "checkpoints", checkpoints=sqrt_checkpoints(problem))
    return _replayed("chen-sqrt", problem, result, costs, started)


def greedy(problem: RematProblem, budget_bytes: Mapping[str, int], costs: CostTable
           ) -> BaselineResult:
    started = time.perf_counter()
    units = budget_bytes[problem.home] // problem.memory_unit
    result = execute(problem, problem.home, "greedy", budget=units, actual=True)
    return _replayed("greedy", problem, result, costs, started)


def _replayed(name: str, problem: RematProblem, result: ExecutionResult, costs: CostTable,
              started: float) -> BaselineResult:
    """An executor policy's decision as a baseline: replayed, or why it found none."""
    if result.decision is None:
        return BaselineResult(name, None, None, time.perf_counter() - started, result.reason)
    candidate = replay(problem, result.decision, costs, name)
    return BaselineResult(name, candidate.schedule, candidate.stats,
                          time.perf_counter() - started)


def checkmate_lp(problem: RematProblem, budget_bytes: Mapping[str, int], costs: CostTable, *,
                 seed: int = 0, time_limit: float = 60.0) -> BaselineResult:
    started = time.perf_counter()
    result = lp_rounding(problem, budget_bytes, costs, seed=seed, time_limit=time_limit)
    note = f"LP {result.lp_status}, {result.tried} roundings"
    if result.candidate is None:
        return BaselineResult("checkmate-lp", None, None, time.perf_counter() - started, note)
    return BaselineResult("checkmate-lp", result.candidate.schedule, result.candidate.stats,
                          time.perf_counter() - started, note)


def chain_dp(graph: Graph, budget_bytes: Mapping[str, int], costs: CostTable,
             memory_unit: int = 1) -> BaselineResult:
    started = time.perf_counter()
    device = next(iter(budget_bytes))
    chain = find_chain(graph, costs, device, memory_unit)
    if chain is None:
        return BaselineResult("chain-dp", None, None, 0.0, "not a chain")
    budget = budget_bytes[device] // memory_unit
    if not chain_fits(len(chain.ab) - 1, budget - chain.bf[0]):
        return BaselineResult("chain-dp", None, None, time.perf_counter() - started,
                              f"a chain of {len(chain.ab) - 1} layers in {budget} units is "
                              "past the DP's limits (planner.remat.chain_dp.chain_fits)")
    solution = solve_chain(chain.af, chain.ab, chain.bf, chain.bb, budget)
    if solution is None:
        return BaselineResult("chain-dp", None, None, time.perf_counter() - started,
                              "no persistent schedule fits")
    schedule = chain_schedule(graph, chain, solution, budget, device)
    return BaselineResult("chain-dp", schedule, simulate(graph, schedule, costs, memory_unit),
                          time.perf_counter() - started)
