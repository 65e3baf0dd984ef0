"""Rematerialization and device placement: XEngine (Checkmate with a device axis) in CP-SAT.

    plan_remat(graph, order, budget_bytes, costs, time_limit=..., workers=..., seed=...)
        -> RematResult (best schedule, status, bound and gap in seconds, the model's outcome)
    smallest_peak(graph, order, device, costs, ...) -> PeakResult
    baselines: keep_all, chen_sqrt, greedy, checkmate_lp, chain_dp

Modules, one job each: problem (nodes, values, stages, windows), coarsen (segments), reorder
(tighten the order), configure (which model tier the size affords), model and constraints (the
XEngine variables and one function per equation), linear (CP-SAT / GLOP backends), decision
(solutions, their cost and memory), policies (heuristic schedules), heuristics (replayed
candidates), solve (CP-SAT with hints), emit (decisions -> Schedule), rematerialize (the entry
point), report (the plan's remat report), lp_rounding, chain_dp, baselines. Op costs come from
planner.profile.costs; schedules are replayed by planner.memory.simulate.
"""

from planner.remat.baselines import (
    BaselineResult,
    chain_dp,
    checkmate_lp,
    chen_sqrt,
    greedy,
    keep_all,
)
from planner.remat.problem import Reduction, RematOptions, RematProblem
from planner.remat.rematerialize import PeakResult, RematResult, plan_remat, smallest_peak

__all__ = [
    "BaselineResult",
    "PeakResult",
    "Reduction",
    "RematOptions",
    "RematProblem",
    "RematResult",
    "chain_dp",
    "checkmate_lp",
    "chen_sqrt",
    "greedy",
    "keep_all",
    "plan_remat",
    "smallest_peak",
]
