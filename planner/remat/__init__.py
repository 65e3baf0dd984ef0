"""Rematerialization and device placement: XEngine (Checkmate with a device axis) in CP-SAT.

    plan_remat(graph, order, budgets, costs, time_limit=..., workers=..., seed=...)
        -> RematResult (schedule, status, objective/bound/gap in seconds, reductions, ...)
    smallest_peak(graph, order, device, costs, ...) -> PeakResult
    min_budget(graph, device, ...) / max_batch(model, request, dim)      (inverse queries)
    costs_from_profile(profile, graph, devices) -> CostTable
    graph_from_node_link(data) / read_graph_json(path) -> (Graph, Profile)
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
from planner.remat.costs import CostTable, costs_from_profile
from planner.remat.graph_json import graph_from_node_link, read_graph_json
from planner.remat.inverse import MaxBatch, MinBudget, max_batch, min_budget
from planner.remat.plan import PeakResult, RematResult, plan_remat, smallest_peak
from planner.remat.problem import Reduction, RematOptions, RematProblem

__all__ = [
    "BaselineResult",
    "CostTable",
    "MaxBatch",
    "MinBudget",
    "PeakResult",
    "Reduction",
    "RematOptions",
    "RematProblem",
    "RematResult",
    "chain_dp",
    "checkmate_lp",
    "chen_sqrt",
    "costs_from_profile",
    "graph_from_node_link",
    "greedy",
    "keep_all",
    "max_batch",
    "min_budget",
    "plan_remat",
    "read_graph_json",
    "smallest_peak",
]
