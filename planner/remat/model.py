"""The XEngine / Checkmate variables of one RematProblem, and the model built from them.

Per device d, stage t, node k / value v (XEngine section 3.2):
- R[d, t, k]: node k is computed on d in stage t (eq. 2); only on or below the diagonal (eq. 7),
  and only at the stages the problem allows (its first stage, its `recompute_stages`);
- S[d, t, v]: value v is resident on d at the start of stage t (checkpointed, eq. 2, 10);
- K[s, d, t, v]: v is copied from s to d in stage t (the copy literal of eq. 1's W term);
- Z[d, t, v] = S + R (eq. 4, 5) and the availability A = Z + sum_s K are linear expressions;
- FREE[d, t, v, k] (Checkmate's Free, XEngine's F, eq. 3, 15): v is freed on d right after k runs
  in stage t (only in the "exact" memory model).

Entries are variable ids of a `LinearModel`, or `ONE` when presolve fixed them to 1 (absent
entries are 0). Two memory models:
- "exact": Checkmate's within-stage recurrence U[d, t, k] (XEngine eq. 6, 13, 14, 16): with one
  device and no reductions this *is* Checkmate's MILP;
- "stage": the same recurrence with frees decided statically: a value present in a stage and not
  saved into the next is freed after the last node that *may* read it there (no FREE
  variables, one integer U per node that may run; an upper bound on what a replay of the
  stage needs, equal to the shared memory model of planner.memory.liveness when nothing is
  recomputed).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Final, Literal

from planner.remat.linear import Expr, LinearModel
from planner.remat.problem import RematProblem


class _One(Enum):
    """A variable presolve fixed to 1 (an enum member, so that `entry is ONE` narrows the type)."""

    ONE = 1

    def __repr__(self) -> str:
        return "ONE"


ONE: Final = _One.ONE
Entry = int | _One
MemoryModel = Literal["exact", "stage"]
Objective = Literal["time", "peak"]


@dataclass
class SaveRow:
    """S[d, t, v] for t in first..first + len(entries) - 1 (None before: absent)."""

    first: int
    entries: list[Entry]

    def at(self, t: int) -> Entry | None:
        i = t - self.first
        return self.entries[i] if 0 <= i < len(self.entries) else None


@dataclass
class RematModel:
    problem: RematProblem
    memory: MemoryModel
    objective: Objective
    budget_units: Mapping[str, int]  # "peak" mode: upper bounds of the peak variables
    peak_floor: Mapping[str, int] = field(default_factory=dict)  # "peak" mode: lower bounds
    persistent: bool = False  # restrict to persistent checkpoints (the chain DP's schedules)
    lm: LinearModel = field(default_factory=LinearModel)
    R: dict[tuple[str, int, int], Entry] = field(default_factory=dict)
    K: dict[tuple[str, str, int, int], int] = field(default_factory=dict)
    S: dict[tuple[str, int], SaveRow] = field(default_factory=dict)
    events: dict[tuple[str, int], set[int]] = field(default_factory=dict)
    computes_at: dict[tuple[str, int], list[int]] = field(default_factory=dict)
    copies_into: dict[tuple[str, int], list[tuple[str, int]]] = field(default_factory=dict)
    peak: dict[str, int] = field(default_factory=dict)  # device -> peak variable ("peak" mode)
    defs: list[tuple[int, Expr]] = field(default_factory=list)  # aux var == expression
    # in-place credits (constraints._credit): var <= each expression, as large as they allow
    credits: list[tuple[int, list[Expr]]] = field(default_factory=list)
    infeasible: list[str] = field(default_factory=list)  # found while building
    stats: dict[str, int] = field(default_factory=dict)

    # -- accessors ---------------------------------------------------------------------------
    def r(self, d: str, t: int, k: int) -> Entry | None:
        return self.R.get((d, t, k))

    def s(self, d: str, t: int, v: int) -> Entry | None:
        value = self.problem.values[v]
        if value.kind == "persistent" and d == self.problem.home:
            return ONE
        row = self.S.get((d, v))
        return None if row is None else row.at(t)

    def copies_in(self, d: str, t: int, v: int) -> list[int]:
        return [self.K[(s, d, t, v)] for s in self.problem.devices
                if (s, d, t, v) in self.K]

    def produced_r(self, d: str, t: int, v: int) -> Entry | None:
        producer = self.problem.values[v].producer
        return None if producer is None else self.R.get((d, t, producer))

    def zs(self, d: str, t: int, v: int) -> Expr:
        """XEngine's Z[d, t, v] = R + S (eq. 4, 5): computed or saved on d."""
        expr = Expr()
        for entry in (self.s(d, t, v), self.produced_r(d, t, v)):
            add_entry(expr, entry)
        return expr

    def available(self, d: str, t: int, v: int) -> Expr:
        """Z[d, t, v] plus the copies of v into d in stage t: v can be read on d in stage t."""
        expr = self.zs(d, t, v)
        for var in self.copies_in(d, t, v):
            expr.add_var(var)
        return expr


def add_entry(expr: Expr, entry: Entry | None, coef: int = 1) -> Expr:
    if entry is ONE:
        expr.const += coef
    elif entry is not None:
        expr.add_var(entry, coef)
    return expr


def entry_value(entry: Entry | None, values: Sequence[float]) -> int:
    if entry is None:
        return 0
    if entry is ONE:
        return 1
    return int(round(values[entry]))
