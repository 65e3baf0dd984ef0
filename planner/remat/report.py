"""The remat phase as the plan reports it (`Plan.solvers`): status, bound, gap and why.

The notes say which model tier ran, what CP-SAT said about that (possibly reduced) model, which
bound the gap is measured against and every reduction with whether it keeps optimality, so that
a FEASIBLE status can be read for what it is.
"""

from __future__ import annotations

from planner.remat.heuristics import Candidate
from planner.remat.rematerialize import RematResult
from schemas.plan import SolverReport, SolverStatus

# What a plan that recomputes says beside the order phase's figures.
KEEP_ALL_FIGURES = ("objective and bound: the order's peak and the floor when every value is "
                    "kept until its last read; this plan recomputes values, and neither bounds "
                    "its peak")


def remat_report(result: RematResult, chosen: Candidate | None = None) -> SolverReport:
    """The report of `result`; `chosen`: the runner-up schedule used instead of the best one
    (RematResult.alternatives), whose time, gap and counts it then gives."""
    model = result.model
    notes = [f"model tier {model.tier} ({model.memory_model} memory)"]
    if model.status is not None:
        bound = (f", bound {model.bound_seconds:.6g} s"
                 if model.bound_seconds is not None else "")
        notes.append(f"CP-SAT on that model: {model.status}{bound} (valid for the "
                     "reduced model only)" if not model.exact else
                     f"CP-SAT: {model.status}{bound}")
    notes.append(f"bound: {result.bound_name}")
    notes += [f"reduction: {r.name} ({'exact' if r.exact else 'not exact'}): {r.detail}"
              for r in model.reductions]
    method, objective, stats = result.method, result.objective_seconds, result.stats
    status: SolverStatus = result.status
    gap = result.gap
    if chosen is not None:
        notes.append(f"the fastest schedule ({result.method}) laid out past the budget; this "
                     "slower one with lower peaks lays out within it")
        method, objective, stats = chosen.name, chosen.seconds, chosen.stats
        gap = max(0.0, (objective - result.bound_seconds) / objective) if objective else 0.0
        status = "OPTIMAL" if gap <= 1e-9 else "FEASIBLE"
    if stats is not None:
        notes.append(f"{stats.recomputes} recomputations, {stats.copies} copies")
    notes += list(result.notes)
    return SolverReport(
        phase="remat", method=method, status=status, objective=objective,
        bound=result.bound_seconds, gap=gap, baseline=result.keep_all_seconds,
        seconds=result.seconds, notes=notes,
    )


def order_report_beside(order: SolverReport, recomputes: int) -> SolverReport:
    """The order phase's report in a plan whose schedule runs `recomputes` recomputations: with
    any, it says that its figures are keeping everything's (the floor is no bound on a plan
    that recomputes)."""
    if not recomputes:
        return order
    return order.model_copy(update={"notes": [*order.notes, KEEP_ALL_FIGURES]})
