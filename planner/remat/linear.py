"""A small solver-neutral 0-1 linear model, solved exactly with CP-SAT or relaxed with GLOP.

The remat model is written once (planner.remat.constraints) against this class and then handed to
either backend: CP-SAT for the integer problem (XEngine/Checkmate), GLOP for Checkmate's LP
relaxation. Variables are integer ids; expressions are `Expr` (constant + {id: coefficient}).
`add_and(target, literals)` states target == AND(literals) exactly (CP-SAT: two clauses with an
enforcement literal; LP: Checkmate's linearization target <= l_i, target >= sum l_i - (n - 1)).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # OR-Tools' cp_model imports pandas (~0.6 s): imported where a model is built
    pass


_INF = 1 << 60
DETERMINISTIC_SHARE = 0.2


class Expr:
    """const + sum(coef * var) over integer variable ids."""

    __slots__ = ("const", "terms")

    def __init__(self, const: int = 0, terms: Mapping[int, int] | None = None):
        self.const = const
        self.terms: dict[int, int] = dict(terms) if terms else {}

    def add_var(self, var: int, coef: int = 1) -> Expr:
        if coef:
            total = self.terms.get(var, 0) + coef
            if total:
                self.terms[var] = total
            else:
                self.terms.pop(var, None)
        return self

    def add(self, other: Expr, coef: int = 1) -> Expr:
        self.const += coef * other.const
        for var, c in other.terms.items():
            self.add_var(var, coef * c)
        return self

    def copy(self) -> Expr:
        return Expr(self.const, self.terms)

    @property
    def is_constant(self) -> bool:
        return not self.terms

    def value(self, values: Sequence[float]) -> float:
        return self.const + sum(c * values[v] for v, c in self.terms.items())


@dataclass
class LinearModel:
    names: list[str] = field(default_factory=list)
    bounds: list[tuple[int, int]] = field(default_factory=list)
    constraints: list[tuple[dict[int, int], int, int]] = field(default_factory=list)
    ands: list[tuple[int, list[tuple[int, bool]]]] = field(default_factory=list)
    objective: Expr = field(default_factory=Expr)
    hint: dict[int, int] = field(default_factory=dict)

    def new_bool(self, name: str) -> int:
        return self.new_int(name, 0, 1)

    def new_int(self, name: str, lo: int, hi: int) -> int:
        self.names.append(name)
        self.bounds.append((lo, hi))
        return len(self.names) - 1

    @property
    def num_vars(self) -> int:
        return len(self.names)

    def add(self, expr: Expr, lo: int | None = None, hi: int | None = None) -> bool:
        """lo <= expr <= hi. Returns False when a constant expression violates it."""
        lo_ = -_INF if lo is None else lo - expr.const
        hi_ = _INF if hi is None else hi - expr.const
        if not expr.terms:
            return lo_ <= 0 <= hi_
        self.constraints.append((dict(expr.terms), lo_, hi_))
        return True

    def add_and(self, target: int, literals: list[tuple[int, bool]]) -> None:
        """target == AND of literals; a literal is (var, True) for var, (var, False) for not var."""
        self.ands.append((target, list(literals)))

    def minimize(self, expr: Expr) -> None:
        self.objective = expr


@dataclass(frozen=True)
class CpResult:
    status: str  # OPTIMAL | FEASIBLE | INFEASIBLE | UNKNOWN | MODEL_INVALID
    values: list[int] | None
    objective: float | None
    bound: float | None
    seconds: float
    deterministic_seconds: float = 0.0


def solve_cpsat(
    lm: LinearModel, *, time_limit: float, workers: int = 1, seed: int = 0,
    hint: Mapping[int, int] | None = None, extra: Iterable[tuple[str, object]] = (),
) -> CpResult:
    from ortools.sat.python import cp_model

    started = time.perf_counter()
    model = cp_model.CpModel()
    xs = [model.new_bool_var(name) if (lo, hi) == (0, 1) else model.new_int_var(lo, hi, name)
          for name, (lo, hi) in zip(lm.names, lm.bounds, strict=True)]
    for terms, lo, hi in lm.constraints:
        items = list(terms.items())
        expr = cp_model.LinearExpr.weighted_sum([xs[v] for v, _ in items], [c for _, c in items])
        if lo <= -_INF:
            model.add(expr <= hi)
        elif hi >= _INF:
            model.add(expr >= lo)
        elif lo == hi:
            model.add(expr == lo)
        else:
            model.add_linear_constraint(expr, lo, hi)
    for target, literals in lm.ands:
        lits = [xs[v] if positive else xs[v].Not() for v, positive in literals]
        model.add_bool_and(lits).only_enforce_if(xs[target])
        model.add_bool_or([xs[target], *[lit.Not() for lit in lits]])
    items = list(lm.objective.terms.items())
    model.minimize(cp_model.LinearExpr.weighted_sum([xs[v] for v, _ in items],
                                                    [c for _, c in items])
                   + lm.objective.const)
    for v, val in (hint or {}).items():
        model.add_hint(xs[v], val)
    solver = cp_model.CpSolver()
    params = solver.parameters
    limit = max(0.05, time_limit - (time.perf_counter() - started))
    params.max_time_in_seconds = limit
    # Reproducible runs stop on CP-SAT's deterministic work clock (here about 0.1-0.3
    # deterministic seconds per wall second with 2 workers); the wall-clock limit only guards a
    # loaded machine, where the result may then depend on timing.
    params.max_deterministic_time = limit * DETERMINISTIC_SHARE
    params.num_workers = max(1, workers)
    params.random_seed = seed
    if workers > 1:
        params.interleave_search = True  # deterministic with several workers
    # CP-SAT 9.15's presolve wrongly cut every optimum of some remat models (chains where it
    # proved 83 optimal while 75 is feasible): solution-removing reductions (dominance), probing
    # and inclusion detection each did it once; they stay off (test_remat_chain.py).
    params.keep_all_feasible_solutions_in_presolve = True
    params.cp_model_probing_level = 0
    params.presolve_inclusion_work_limit = 0
    for key, setting in extra:
        setattr(params, key, setting)
    code = solver.solve(model)
    status = solver.status_name(code)
    values = None
    objective = bound = None
    if code in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        values = [int(solver.value(x)) for x in xs]
        objective = solver.objective_value
        bound = solver.best_objective_bound
    elif code == cp_model.UNKNOWN:
        bound = solver.best_objective_bound
    return CpResult(status, values, objective, bound, time.perf_counter() - started,
                    solver.deterministic_time)


@dataclass(frozen=True)
class LpResult:
    status: str
    values: list[float] | None
    objective: float | None
    seconds: float


def solve_lp(lm: LinearModel, *, time_limit: float = 60.0) -> LpResult:
    """The LP relaxation (every variable continuous in its bounds) with GLOP."""
    from ortools.linear_solver import pywraplp

    started = time.perf_counter()
    solver = pywraplp.Solver.CreateSolver("GLOP")
    inf = solver.infinity()
    xs = [solver.NumVar(lo, hi, "") for lo, hi in lm.bounds]
    for terms, lo, hi in lm.constraints:
        row = solver.Constraint(-inf if lo <= -_INF else lo, inf if hi >= _INF else hi)
        for v, c in terms.items():
            row.SetCoefficient(xs[v], c)
    for target, literals in lm.ands:
        negatives = 0
        low = solver.Constraint(1 - len(literals), inf)
        low.SetCoefficient(xs[target], 1)
        for v, positive in literals:
            up = solver.Constraint(-inf, 0 if positive else 1)
            up.SetCoefficient(xs[target], 1)
            up.SetCoefficient(xs[v], -1 if positive else 1)
            low.SetCoefficient(xs[v], -1 if positive else 1)
            negatives += not positive
        low.SetLb(1 - len(literals) + negatives)
    objective = solver.Objective()
    for v, c in lm.objective.terms.items():
        objective.SetCoefficient(xs[v], c)
    objective.SetOffset(lm.objective.const)
    objective.SetMinimization()
    solver.SetTimeLimit(int(max(1.0, time_limit) * 1000))
    code = solver.Solve()
    names = {pywraplp.Solver.OPTIMAL: "OPTIMAL", pywraplp.Solver.FEASIBLE: "FEASIBLE",
             pywraplp.Solver.INFEASIBLE: "INFEASIBLE"}
    status = names.get(code, "UNKNOWN")
    if code not in (pywraplp.Solver.OPTIMAL, pywraplp.Solver.FEASIBLE):
        return LpResult(status, None, None, time.perf_counter() - started)
    return LpResult(status, [x.solution_value() for x in xs], objective.Value(),
                    time.perf_counter() - started)
