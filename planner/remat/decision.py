"""A solution of a RematProblem as decisions per stage, and what it costs under the model.

`Decision` lists, per stage, the nodes computed (on which device) and the values copied. Which
values are resident between stages follows from it: the least residency that serves every read
(`residency`), which is also what the schedule emitter keeps. `evaluate` prices a decision with
the stage memory model (planner.remat.model), `from_solution` reads one out of a model solution,
`hint_for` turns one into a CP-SAT hint.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from planner.remat.model import ONE, RematModel, entry_value
from planner.remat.problem import RematProblem


@dataclass
class Decision:
    computes: list[list[tuple[int, str]]]  # per stage: (node, device)
    copies: list[list[tuple[int, str, str]]] = field(default_factory=list)  # (value, src, dst)

    def __post_init__(self) -> None:
        if not self.copies:
            self.copies = [[] for _ in self.computes]

    @classmethod
    def empty(cls, stages: int) -> Decision:
        return cls([[] for _ in range(stages)], [[] for _ in range(stages)])


@dataclass(frozen=True)
class Evaluation:
    cost: int  # time units
    peaks: dict[str, int]  # device -> peak units (stage memory model)
    recomputes: int
    copies: int

    def fits(self, budget_units: Mapping[str, int]) -> bool:
        return all(self.peaks.get(d, 0) <= b for d, b in budget_units.items())


class DecisionError(ValueError):
    """A decision that reads a value where it cannot be."""


def residency(problem: RematProblem, decision: Decision) -> dict[tuple[str, int], list[int]]:
    """(device, value) -> sorted stages at whose start the value must be resident.

    Within a stage, creations (computations, copies in) come before reads. A read at stage u is
    served by the latest creation at or before u; the value is resident from the stage after
    that creation through u. Outputs are read on the home device at the end of the step.
    """
    p = problem
    points: dict[tuple[str, int], list[tuple[int, int]]] = {}  # (stage, 0 create / 1 read)

    def mark(d: str, v: int, t: int, kind: int) -> None:
        value = p.values[v]
        if value.kind == "persistent" and d == p.home:
            return
        points.setdefault((d, v), []).append((t, kind))

    for value in p.values:
        if value.producer is None and value.kind == "input":
            mark(p.home, value.id, -1, 0)
        if value.kind == "output":
            mark(p.home, value.id, p.stages, 1)
    for t, computes in enumerate(decision.computes):
        for k, d in computes:
            node = p.nodes[k]
            for v in node.values:
                mark(d, v, t, 0)
            for v in node.reads:
                mark(d, v, t, 1)
        for v, src, dst in decision.copies[t]:
            mark(src, v, t, 1)
            mark(dst, v, t, 0)
    resident: dict[tuple[str, int], list[int]] = {}
    for key, pts in points.items():
        pts.sort()
        stages: set[int] = set()
        created = None
        for t, kind in pts:
            if kind == 0:
                created = t
            elif created is None:
                raise DecisionError(f"value {key[1]} is read on {key[0]} in stage {t} before "
                                    "it exists there")
            elif created < t:
                stages.update(range(created + 1, t + 1))
        value = p.values[key[1]]
        if len(p.devices) == 1 and value.size <= p.options.tiny_units and pts[0][1] == 0:
            # small values are kept from their first creation to their last possible read
            end = p.stages if value.kind == "output" else value.last_read
            stages.update(range(pts[0][0] + 1, end + 1))
        if stages:
            resident[key] = sorted(stages)
    return resident


def possible_positions(problem: RematProblem, device: str) -> list[list[int]]:
    """Per stage, the nodes that may run on `device` in it (ascending): the memory rows."""
    rows: list[list[int]] = [[] for _ in range(problem.stages)]
    for node in problem.nodes:
        if not node.runs_on(device):
            continue
        rows[node.id].append(node.id)
        for t in node.recompute_stages:
            rows[t].append(node.id)
    for row in rows:
        row.sort()
    return rows


def stage_peak(problem: RematProblem, device: str, t: int, positions: Sequence[int],
               computed: set[int], start: dict[int, int], kept: set[int],
               actual: bool = False) -> int:
    """Peak units on `device` in stage t under the static-free memory model (see
    constraints.add_stage_memory): `start` value -> copies present at the start (saved or copied
    in), `computed` the nodes run, `kept` the values saved into stage t + 1. With `actual`, a
    value is freed after the last node that does read it (what a replay of the stage needs)."""
    p = problem
    present = dict(start)
    for k in computed:
        for v in p.nodes[k].values:
            present[v] = present.get(v, 0) + 1
    running = p.base[device] + sum(p.values[v].size * n for v, n in start.items())
    drops: dict[int, int] = {}
    lasts: dict[int, int] = {}  # dropped value -> the node after which it goes
    for v, n in present.items():
        gone = n - (v in kept)
        if gone > 0:
            if actual:
                value = p.values[v]
                readers = [c for c in value.consumers if c in computed]
                last = max(readers) if readers else (
                    value.producer if value.producer in computed else -1)
            else:
                last = p.last_reader_in_stage(v, device, t)
            drops[last] = drops.get(last, 0) + gone * p.values[v].size
            lasts[v] = last
    tiny = p.options.tiny_units if len(p.devices) == 1 and not actual else -1
    credit = _credited_units(p, computed, present, kept, lasts)
    peak = 0
    pending = sorted(drops.items())
    i = 0
    anchor = running  # usage at the last row
    run: int | None = None  # anchor + allocations of small nodes since it
    last = len(positions) - 1
    for index, k in enumerate(positions):
        while i < len(pending) and pending[i][0] < k:
            running -= pending[i][1]
            i += 1
        node = p.nodes[k]
        made = sum(p.values[v].size for v in node.values) if k in computed else 0
        work = node.workspace if k in computed else 0
        running += made
        if last > 0 and index < last and sum(p.values[v].size for v in node.values) \
                + node.workspace <= tiny:
            run = (anchor if run is None else run) + made + work
            continue
        if run is not None:
            peak = max(peak, run)
            run = None
        anchor = running
        peak = max(peak, running + work - credit.get(k, 0))
    return peak


def _credited_units(p: RematProblem, computed: set[int], present: dict[int, int],
                    kept: set[int], lasts: dict[int, int]) -> dict[int, int]:
    """Units each computed node's in-place outputs do not add (constraints: the in-place
    credit): the dropped values it may overwrite whose last reader it is, each output at most
    its own units."""
    credit: dict[int, int] = {}
    for k in computed:
        for units, options in p.nodes[k].in_place:
            gone = sum(size for v, size in options
                       if lasts.get(v) == k and present.get(v, 0) - (v in kept) > 0)
            if gone:
                credit[k] = credit.get(k, 0) + min(units, gone)
    return credit


def evaluate(problem: RematProblem, decision: Decision) -> Evaluation:
    """Time units and per-device peak units of `decision` under the model's memory rows."""
    p = problem
    resident = residency(p, decision)
    at_start: dict[str, list[dict[int, int]]] = {d: [{} for _ in range(p.stages + 1)]
                                                for d in p.devices}
    for (d, v), stages in resident.items():
        for t in stages:
            at_start[d][t][v] = 1
    computed: dict[str, list[set[int]]] = {d: [set() for _ in range(p.stages)]
                                           for d in p.devices}
    cost = recomputes = copies = 0
    for t, computes in enumerate(decision.computes):
        for k, d in computes:
            node = p.nodes[k]
            if not p.may_run(k, d, t):
                raise DecisionError(f"node {k} may not run on {d} in stage {t}")
            cost += node.cost[d]
            recomputes += t != k
            computed[d][t].add(k)
        for v, src, dst in decision.copies[t]:
            cost += p.values[v].copy_cost[(src, dst)]
            start = at_start[dst][t]
            start[v] = start.get(v, 0) + 1
            copies += 1
    peaks = {}
    for d in p.devices:
        rows = possible_positions(p, d)
        peak = p.base[d]
        for t in range(p.stages):
            if rows[t]:
                peak = max(peak, stage_peak(p, d, t, rows[t], computed[d][t], at_start[d][t],
                                            set(at_start[d][t + 1])))
        peaks[d] = peak
    return Evaluation(cost=cost, peaks=peaks, recomputes=recomputes, copies=copies)


def from_solution(model: RematModel, values: Sequence[float]) -> Decision:
    p = model.problem
    decision = Decision.empty(p.stages)
    for (d, t, k), entry in sorted(model.R.items(), key=lambda kv: (kv[0][1], kv[0][2])):
        if entry_value(entry, values):
            decision.computes[t].append((k, d))
    for (s, d, t, v), var in sorted(model.K.items(), key=lambda kv: (kv[0][2], kv[0][3])):
        if round(values[var]):
            decision.copies[t].append((v, s, d))
    return decision


def hint_for(model: RematModel, decision: Decision) -> dict[int, int] | None:
    """Values for every variable of `model` that `decision` implies (None: not representable)."""
    p, lm = model.problem, model.lm
    values = [0] * lm.num_vars
    for t, computes in enumerate(decision.computes):
        for k, d in computes:
            entry = model.R.get((d, t, k))
            if entry is None:
                return None
            if entry is not ONE:
                values[entry] = 1
        for v, src, dst in decision.copies[t]:
            var = model.K.get((src, dst, t, v))
            if var is None:
                return None
            values[var] = 1
    try:
        resident = residency(p, decision)
    except DecisionError:
        return None
    for (d, v), stages in resident.items():
        row = model.S.get((d, v))
        if row is None:
            return None
        for t in stages:
            entry = row.at(t)
            if entry is None:
                return None
            if entry is not ONE:
                values[entry] = 1
    for target, literals in lm.ands:
        values[target] = int(all(values[v] == (1 if positive else 0) for v, positive in literals))
    for var, caps in model.credits:
        lo, hi = lm.bounds[var]
        values[var] = max(lo, min(hi, *(int(cap.value(values)) for cap in caps)))
    for var, expr in model.defs:
        lo, hi = lm.bounds[var]
        values[var] = min(max(int(expr.value(values)), lo), hi)
    if model.peak:
        evaluation = evaluate(p, decision)
        for d, var in model.peak.items():
            lo, hi = lm.bounds[var]
            values[var] = min(max(evaluation.peaks[d], lo), hi)
    return dict(enumerate(values))
