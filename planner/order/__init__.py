"""Operator ordering: a topological order with a low peak of live bytes (OLLA's lifetime half).

    optimize_order(graph, *, time_limit=..., workers=..., seed=..., use_solver=True) -> OrderResult

Modules, one job each: heuristics (levels and list schedulers), control_edges (OLLA's early
updates), olla_ilp (the lifetime ILP), refine (exact re-ordering of windows around the peak),
optimize (the entry point that runs them under a time limit and reports status, bound and gap).
"""

from planner.order.optimize import OrderResult, optimize_order

__all__ = ["OrderResult", "optimize_order"]
