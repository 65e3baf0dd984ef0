"""Rematerialization and device placement: XEngine (Checkmate with a device axis) in CP-SAT.

    plan_remat(graph, order, budgets, costs, time_limit=..., workers=..., seed=...)
        -> RematResult (schedule, status, objective/bound/gap in seconds, reductions, ...)
    smallest_peak(graph, order, device, costs, ...) -> PeakResult
    baselines: keep_all, chen_sqrt, greedy, checkmate_lp, chain_dp

Modules, one job each: costs (time tables), problem (nodes, values, stages, windows), coarsen
(segments), reorder (tighten the order), configure (which model the size affords), model and
constraints (the XEngine variables and one function per equation), linear (CP-SAT / GLOP
backends), decision (solutions, their cost and memory), executor (heuristic schedules),
heuristics (replayed candidates), solver (CP-SAT with hints), emit (decisions -> Schedule),
simulate (replay), plan (the entry point), lp_rounding, chain_dp, baselines, inverse,
graph_json.
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
