"""The XEngine MIQP (section 3.2) in CP-SAT form, one function per family of constraints.

Each function adds one family to a `RematModel` and names the equation of XEngine (Schuler et al.
2022, section 3.2) it encodes; Checkmate's (Jain et al. 2020) are the same without the device axis.
Deviations from the paper, each documented where it is made:

- eq. 1's copy term sum w[e,d,d'] R[d',t,v] Z[d,t,u] charges a copy for every device holding u,
  even one that is v's own device; we use explicit copy literals K[s,d,t,u] (u copied from s to
  d in stage t), which make the term linear and exact (one copy per tensor, stage and
  destination; with two devices K is exactly the product "u needed on d" AND "u on s");
- a copy occupies memory on its destination (the paper does not count it), may be kept there
  (eq. 11 extended), and is made from a device that computed (or preloaded) the value;
- eq. 12 requires inputs on the computing device itself (computed, saved, or copied in);
- in-place writes (not in the papers, whose nodes each write bytes of their own): while a node
  runs, an output it may write over a value it frees there is credited that value's bytes (a
  variable up to the output's units, at most the units freed, zero when the node does not run);
- exact reductions: presolve of variables that every schedule must set to 1, one save variable
  per run of stages without an event for the value (keeping a value through stages that neither
  read, create nor copy it is only useful when it is kept to the next event), no recompute or
  copy of a value already resident (eq. 5 then makes Z = R + S a sum), and memory constraints
  with identical variable parts merged (the one with the largest constant dominates).
"""

from __future__ import annotations

from planner.remat.linear import Expr
from planner.remat.model import ONE, Entry, RematModel, SaveRow, add_entry
from planner.remat.problem import Node


def add_compute_variables(m: RematModel) -> None:
    """R[d, t, k] (eq. 2) on or below the diagonal only (eq. 7); each node is computed for the
    first time in its own stage on exactly one device (eq. 8 and 9 together). The nodes of a
    recompute unit (a coarsened segment) share one variable per device and stage."""
    p, lm = m.problem, m.lm
    unit_vars: dict[tuple[str, int, int], int] = {}  # nodes of a unit share their R variable
    for node in p.nodes:
        runnable = [d for d in p.devices
                    if d in node.cost and (node.pinned is None or node.pinned == d)]
        if len(runnable) == 1:
            m.R[(runnable[0], node.id, node.id)] = ONE
        else:
            first = Expr()
            for d in runnable:
                var = lm.new_bool(f"R[{d},{node.id},{node.id}]")
                m.R[(d, node.id, node.id)] = var
                first.add_var(var)
            lm.add(first, 1, 1)
        for t in node.recompute_stages:
            for d in runnable:
                unit_key = (d, t, node.unit) if node.unit is not None else None
                unit_var = unit_vars.get(unit_key) if unit_key else None
                if unit_var is None:
                    unit_var = lm.new_bool(f"R[{d},{t},{node.id}]")
                    if unit_key:
                        unit_vars[unit_key] = unit_var
                m.R[(d, t, node.id)] = unit_var
    for (d, t, k) in m.R:
        m.computes_at.setdefault((d, t), []).append(k)
    for key in m.computes_at:
        m.computes_at[key].sort()
    m.stats["R"] = len({e for e in m.R.values() if e is not ONE})


def _stages_of(m: RematModel) -> dict[int, list[tuple[str, int]]]:
    by_node: dict[int, list[tuple[str, int]]] = {}
    for (d, t, k) in m.R:
        by_node.setdefault(k, []).append((d, t))
    return by_node


def add_copy_literals(m: RematModel) -> None:
    """K[s, d, t, v]: the copy literals of eq. 1's W term, one per value, stage, source and
    destination where a reader of v may run on d while v may be on s. A copy source is a device
    that computes v (or holds it from the start, for sources)."""
    p, lm = m.problem, m.lm
    if len(p.devices) == 1:
        return
    stages = _stages_of(m)
    for v in p.values:
        native: dict[str, int] = {}  # device -> first stage v can be there without a copy
        if v.producer is None:
            native[p.home] = 0
        else:
            for d, t in stages.get(v.producer, []):
                native[d] = min(native.get(d, t), t)
        last = v.last_read
        for c in v.consumers:
            for d, t in stages.get(c, []):
                if t > last:
                    continue
                for s, since in native.items():
                    if s != d and since <= t and (s, d, t, v.id) not in m.K:
                        m.K[(s, d, t, v.id)] = lm.new_bool(f"K[{s}>{d},{t},{v.id}]")
    for (s, d, t, vid) in m.K:
        m.copies_into.setdefault((d, t), []).append((s, vid))
    m.stats["K"] = len(m.K)


def add_save_variables(m: RematModel) -> None:
    """S[d, t, v] (eq. 2) only after v can first exist on d (eq. 10) and up to its last read.

    Presolve (exact): S is fixed to 1 where every schedule keeps v: outputs on the home device
    until the end; with one device, a value that cannot be recreated before a reader's first
    computation is kept until that reader. Between two events of v on d (a stage that may
    create, read or copy it) one variable serves the whole run of stages.
    """
    p, lm = m.problem, m.lm
    single = len(p.devices) == 1
    stages = _stages_of(m)
    end_of_step = p.stages
    created_by_copy: dict[tuple[str, int], list[int]] = {}
    copied_out: dict[tuple[str, int], list[int]] = {}
    for (s, d, t, vid) in m.K:
        created_by_copy.setdefault((d, vid), []).append(t)
        copied_out.setdefault((s, vid), []).append(t)
    count = 0
    for v in p.values:
        for d in p.devices:
            if v.kind == "persistent" and d == p.home:
                continue
            creations = sorted(
                {t for dd, t in stages.get(v.producer, []) if dd == d}
                if v.producer is not None else set()
            ) + sorted(created_by_copy.get((d, v.id), []))
            creations.sort()
            preloaded = v.producer is None and d == p.home
            if not creations and not preloaded:
                continue
            first = -1 if preloaded else creations[0]
            is_home_output = v.kind == "output" and d == p.home
            end = end_of_step if is_home_output else v.last_read
            if end <= first:
                continue
            events = set(creations) | set(copied_out.get((d, v.id), []))
            for c in v.consumers:
                events.update(t for dd, t in stages.get(c, []) if dd == d)
            forced = max(first, 0) if preloaded else first
            if is_home_output or (single and v.size <= p.options.tiny_units):
                forced = end
            elif single:
                for c in sorted(v.consumers):
                    if c > end or any(first < x <= c for x in creations):
                        break
                    forced = max(forced, c)
            entries: list[Entry] = []
            prev: Entry | None = None
            for t in range(first + 1, end + 1):
                if t <= forced:
                    entry: Entry = ONE
                elif prev is None or prev is ONE or (t - 1) in events:
                    entry = lm.new_bool(f"S[{d},{t},{v.id}]")
                    count += 1
                else:
                    entry = prev
                entries.append(entry)
                prev = entry
            m.S[(d, v.id)] = SaveRow(first + 1, entries)
            m.events[(d, v.id)] = events
    m.stats["S"] = count


def add_save_needs_availability(m: RematModel) -> None:
    """Eq. 11, extended with copies: v is saved into stage t on d only if it was available on d
    in stage t - 1 (computed, saved or copied in there)."""
    for (d, v), row in m.S.items():
        for i, entry in enumerate(row.entries):
            if entry is ONE or (i > 0 and row.entries[i - 1] is entry):
                continue
            t = row.first + i
            before = m.available(d, t - 1, v)
            before.add_var(entry, -1)
            if not m.lm.add(before, 0, None):
                m.infeasible.append(f"S[{d},{t},{v}] cannot be satisfied")


def add_inputs_available(m: RematModel) -> None:
    """Eq. 12: node k runs on d in stage t only if every value it reads is available on d then
    (computed earlier in the stage, saved, or copied in; XEngine lets the copy come from any
    device, we make the copy explicit)."""
    p, lm = m.problem, m.lm
    for (d, t, k), entry in m.R.items():
        for u in p.nodes[k].reads:
            have = m.available(d, t, u)
            if have.const >= 1:
                continue
            if have.is_constant:
                if entry is ONE:
                    m.infeasible.append(
                        f"node {k} must run on {d} in stage {t} but value {u} cannot be there")
                else:
                    lm.add(Expr(0, {entry: 1}), 0, 0)
                continue
            add_entry(have, entry, -1)
            lm.add(have, 0, None)


def add_copy_sources(m: RematModel) -> None:
    """Eq. 1's W term, linearized exactly: a copy K[s, d, t, v] needs v computed or saved on s in
    stage t (K <= Z[s, t, v]); v is copied into d at most once per stage and only when it is not
    already there (sum_s K + S[d, t, v] + R[d, t, v] <= 1)."""
    p, lm = m.problem, m.lm
    into: dict[tuple[str, int, int], list[int]] = {}
    for (s, d, t, v), var in m.K.items():
        source = m.zs(s, t, v)
        if source.const < 1:
            if source.is_constant:
                lm.add(Expr(0, {var: 1}), 0, 0)
            else:
                source.add_var(var, -1)
                lm.add(source, 0, None)
        into.setdefault((d, t, v), []).append(var)
    for (d, t, v), literals in into.items():
        once = Expr(0, {var: 1 for var in literals})
        producer = p.values[v].producer
        single_valued = producer is None or len(p.nodes[producer].values) == 1
        if single_valued:
            add_entry(once, m.s(d, t, v))
            add_entry(once, m.produced_r(d, t, v))
            lm.add(once, None, 1)
        else:
            for other in (m.s(d, t, v), m.produced_r(d, t, v)):
                pair = Expr(0, once.terms)
                add_entry(pair, other)
                lm.add(pair, None, 1)


def add_no_redundant_recompute(m: RematModel) -> None:
    """Eq. 5 as an exact sum: a node whose only value is resident on d is not recomputed there
    (R[d, t, k] + S[d, t, v] <= 1), so Z = R + S never double counts it. Exact: dropping such a
    recomputation keeps the schedule valid and makes it cheaper."""
    p, lm = m.problem, m.lm
    for (d, t, k), entry in m.R.items():
        node = p.nodes[k]
        if t == k or len(node.values) != 1 or node.unit is not None:
            continue
        saved = m.s(d, t, node.values[0])
        if saved is None:
            continue
        both = add_entry(Expr(), saved)
        add_entry(both, entry)
        lm.add(both, None, 1)


def add_persistent_checkpoints(m: RematModel) -> None:
    """Optional restriction to *persistent* schedules (Beaumont et al. 2019; the class the chain
    DP of planner.remat.chain_dp optimizes over): after the forward phase, a recomputable value
    saved into a stage stays saved until its last reader that is never recomputed,
    S[d,t,v] <= S[d,t+1,v] for forward_end <= t < that reader.
    General Checkmate schedules may drop a checkpoint and recompute it later, which can be
    cheaper on chains with uneven sizes; this family lets the two be compared exactly."""
    p, lm = m.problem, m.lm
    for (_, v), row in m.S.items():
        value = p.values[v]
        if value.producer is None or not p.nodes[value.producer].recomputable:
            continue
        fixed = [c for c in value.consumers if not p.nodes[c].recomputable]
        if not fixed:
            continue
        last = max(fixed)
        for t in range(max(row.first, p.forward_end), last):
            here, after = row.at(t), row.at(t + 1)
            if here is None or here is ONE or here is after:
                continue
            keep = Expr(0, {here: 1})
            add_entry(keep, after, -1)
            lm.add(keep, None, 0)


def _bound(m: RematModel, d: str) -> tuple[Expr, int | None]:
    """What memory on d is compared with: the budget, or the peak variable ("peak" mode)."""
    if m.objective == "peak":
        if d not in m.peak:
            floor = min(m.peak_floor.get(d, 0), m.budget_units[d])
            m.peak[d] = m.lm.new_int(f"peak[{d}]", floor, m.budget_units[d])
        return Expr(0, {m.peak[d]: 1}), None
    return Expr(), m.budget_units[d]


def _limit(m: RematModel, d: str, usage: Expr, seen: dict) -> None:
    key = (d, frozenset(usage.terms.items()))
    if seen.get(key, -1) >= usage.const:
        return
    seen[key] = usage.const
    bound, budget = _bound(m, d)
    if budget is None:
        usage = usage.copy().add(bound, -1)
        m.lm.add(usage, None, 0)
    elif not m.lm.add(usage, None, budget):
        m.infeasible.append(f"{d}: {usage.const} units are needed at some stage whatever the "
                            f"schedule, above the budget of {budget}")


def add_stage_memory(m: RematModel) -> None:
    """XEngine eq. 6, 13 and 14 with frees decided statically (no FREE variables):

    U[d,t,k_1] = base + sum_v size_v (S[d,t,v] + copies in) + size(k_1) R[d,t,k_1] - dropped_1,
    U[d,t,k_i] = U[d,t,k_(i-1)] + size(k_i) R[d,t,k_i] - dropped_i,
    U[d,t,k_i] + workspace(k_i) R[d,t,k_i] <= budget, over the nodes k_1 < k_2 < ... that may
    run on d in stage t. A value present in the stage (computed, saved or copied in) and not saved
    into stage t + 1 is dropped right after the last node that *may* read it in the stage:
    dropped_i sums size_v (R + S + copies in - S[d,t+1,v]) over those values. Checkmate frees
    after the last node that *does* read it (eq. 15-16, the "exact" model) and never frees a
    saved value its stage does not read; this accounting is linear, needs no extra literals,
    and bounds what a replay of the stage needs.
    Rows of one-node stages with identical variable parts are merged (the largest constant
    dominates, exact)."""
    p, lm = m.problem, m.lm
    tiny = p.options.tiny_units if len(p.devices) == 1 else -1
    for d in p.devices:
        seen: dict = {}
        present_by_stage: dict[int, set[int]] = {}
        for (dd, v), row in m.S.items():
            if dd != d:
                continue
            entries = row.entries
            for i, entry in enumerate(entries):  # where S[d,t,v] - S[d,t+1,v] may be nonzero
                if i + 1 == len(entries) or entries[i + 1] is not entry:
                    present_by_stage.setdefault(row.first + i, set()).add(v)
        for (dd, t, k) in m.R:
            if dd == d:
                present_by_stage.setdefault(t, set()).update(p.nodes[k].values)
        for (dd, t), lst in m.copies_into.items():
            if dd == d:
                present_by_stage.setdefault(t, set()).update(v for _, v in lst)
        starts = _stage_starts(m, d)
        for t in range(p.stages):
            positions = m.computes_at.get((d, t), [])
            if not positions:
                continue
            dropped: dict[int, Expr] = {}
            for v in present_by_stage.get(t, ()):
                value = p.values[v]
                if value.kind == "persistent" and d == p.home:
                    continue
                gone = m.available(d, t, v)
                add_entry(gone, m.s(d, t + 1, v), -1)
                if gone.is_constant and gone.const == 0:
                    continue
                last = p.last_reader_in_stage(v, d, t)
                index = next((i for i, k in enumerate(positions) if k > last), None)
                if index is not None:
                    dropped.setdefault(index, Expr()).add(gone, value.size)
            running = starts[t]
            anchor = starts[t]  # usage at the last row (a U variable once there is one)
            run: Expr | None = None  # anchor + allocations of small nodes since it
            last = len(positions) - 1
            for i, k in enumerate(positions):
                node, entry = p.nodes[k], m.R[(d, t, k)]
                made = sum(p.values[v].size for v in node.values)
                step = Expr()
                if i in dropped:
                    step.add(dropped[i], -1)
                add_entry(step, entry, made)
                if last == 0:
                    credit = _stage_in_place_credit(m, d, t, k, entry)
                    usage = running.copy().add(step).add(credit, -1)
                    add_entry(usage, entry, node.workspace)
                    _limit(m, d, usage, seen)
                    continue
                running = running.copy().add(step)
                if i < last and made + node.workspace <= tiny:
                    run = anchor.copy() if run is None else run
                    add_entry(run, entry, made + node.workspace)
                    continue
                if run is not None:
                    _limit(m, d, run, seen)
                    run = None
                # while k runs, an output written in place is counted beside the value it
                # replaces (dropped after k), so U exceeds the usage row by up to the credit
                in_place = sum(units for units, _ in node.in_place)
                u = lm.new_int(f"U[{d},{t},{k}]", 0, m.budget_units[d] + in_place)
                m.defs.append((u, running.copy()))
                define = running.copy()
                define.add_var(u, -1)
                lm.add(define, 0, 0)
                running = anchor = Expr(0, {u: 1})
                credit = _stage_in_place_credit(m, d, t, k, entry)
                usage = running.copy().add(credit, -1)
                add_entry(usage, entry, node.workspace)
                _limit(m, d, usage, seen)
        m.stats[f"memory_rows[{d}]"] = len(seen)


def _stage_in_place_credit(m: RematModel, d: str, t: int, k: int, entry: Entry) -> Expr:
    """What node k's in-place outputs (Node.in_place) do not add while it runs in stage t of
    the static-free model: a value k may overwrite is dropped after k when k is the last node
    that may read it in the stage and it is not saved into the next, so its bytes go to the
    output instead. A variable up to each output's units, at most the units of those dropped
    values present, and nothing when k does not run."""
    p = m.problem
    credit = Expr()
    for index, (units, options) in enumerate(p.nodes[k].in_place):
        gone = Expr()
        for v, size in options:
            if p.last_reader_in_stage(v, d, t) == k:
                leaving = m.available(d, t, v)
                add_entry(leaving, m.s(d, t + 1, v), -1)
                gone.add(leaving, size)
        if gone.is_constant and gone.const <= 0:
            continue
        caps = [gone] if entry is ONE else [gone, Expr(0, {entry: units})]
        credit.add(_credit(m, f"I[{d},{t},{k},{index}]", units, caps))
    return credit


def _stage_starts(m: RematModel, d: str) -> list[Expr]:
    """base + sum_v size_v (S[d,t,v] + copies of v into d in stage t), for every stage."""
    p = m.problem
    starts = [Expr(p.base[d]) for _ in range(p.stages)]
    for (dd, v), row in m.S.items():
        if dd != d:
            continue
        size = p.values[v].size
        for i, entry in enumerate(row.entries):
            t = row.first + i
            if t < p.stages:
                add_entry(starts[t], entry, size)
    for (dd, t), lst in m.copies_into.items():
        if dd == d:
            for src, v in lst:
                starts[t].add_var(m.K[(src, d, t, v)], p.values[v].size)
    return starts


def add_memory_recurrence(m: RematModel) -> None:
    """Checkmate's memory recurrence, per device (XEngine eq. 6, 13-16):
    U[d,t,first] = base + sum_v size_v (S[d,t,v] + copies in) + size(first) R[d,t,first];
    U[d,t,next] = U[d,t,k] - freed[d,t,k] + size(next) R[d,t,next], with
    freed[d,t,k] = sum over v read or written by k of size_v FREE[d,t,v,k], and
    FREE[d,t,v,k] = R[d,t,k] AND NOT S[d,t+1,v] AND NOT R[d,t,j] for every later reader j of v in
    the stage (eq. 15-16's hazard bounds, stated as an exact AND literal);
    U[d,t,k] + workspace_k R[d,t,k] <= budget."""
    p = m.problem
    ands_before = len(m.lm.ands)
    for d in p.devices:
        seen: dict = {}
        for t in range(p.stages):
            comps = m.computes_at.get((d, t), [])
            running = Expr(p.base[d])
            for (dd, v), row in m.S.items():
                if dd == d:
                    add_entry(running, row.at(t), p.values[v].size)
            for src, v in m.copies_into.get((d, t), []):
                running.add_var(m.K[(src, d, t, v)], p.values[v].size)
            for index, k in enumerate(comps):
                node, entry = p.nodes[k], m.R[(d, t, k)]
                add_entry(running, entry, sum(p.values[v].size for v in node.values))
                later = comps[index + 1:]
                frees: dict[int, Expr] = {}
                for v in sorted(set(node.reads) | set(node.values)):
                    value = p.values[v]
                    if value.kind == "persistent" and d == p.home:
                        continue
                    literals: list[tuple[Entry | None, bool]] = [(entry, True),
                                                                 (m.s(d, t + 1, v), False)]
                    literals += [(m.R[(d, t, j)], False) for j in later
                                 if j in value.consumers]
                    freed = _and(m, literals, f"F[{d},{t},{v},{k}]")
                    if freed is not None:
                        frees[v] = freed
                check = running.copy()
                add_entry(check, entry, node.workspace)
                for credit in _in_place_credits(m, node, frees, f"{d},{t},{k}"):
                    check.add(credit, -1)
                _limit(m, d, check, seen)
                for v, freed in frees.items():
                    running.add(freed, -p.values[v].size)
    m.stats["F"] = len(m.lm.ands) - ands_before


def _in_place_credits(m: RematModel, node: Node, frees: dict[int, Expr], name: str
                      ) -> list[Expr]:
    """The bytes the node's in-place outputs do not add while it runs (Node.in_place): an
    output written over a value this node frees takes that value's storage, as
    planner.memory.replay writes it. One candidate: its free literal times its units; several:
    a variable up to the output's units, at most the units of those freed."""
    credits = []
    for k, (units, options) in enumerate(node.in_place):
        freed = [(frees[v], size) for v, size in options if v in frees]
        if len(freed) == 1:
            literal, size = freed[0]
            credits.append(Expr().add(literal, min(size, units)))
        elif freed:
            gone = Expr()
            for literal, size in freed:
                gone.add(literal, size)
            credits.append(_credit(m, f"I[{name},{k}]", units, [gone]))
    return credits


def _credit(m: RematModel, name: str, units: int, caps: list[Expr]) -> Expr:
    """A variable from 0 to `units`, at most each of `caps` (recorded for hints)."""
    var = m.lm.new_int(name, 0, units)
    for cap in caps:
        m.lm.add(Expr(0, {var: 1}).add(cap, -1), None, 0)
    m.credits.append((var, caps))
    return Expr(0, {var: 1})


def _and(m: RematModel, literals: list[tuple[Entry | None, bool]], name: str) -> Expr | None:
    """AND of literals as an expression (None when it is 0): constants folded, a single literal
    used as is, otherwise a new variable tied to the literals exactly."""
    kept: list[tuple[int, bool]] = []
    for entry, positive in literals:
        if entry is None:
            if positive:
                return None  # an absent variable is 0
            continue
        if entry is ONE:
            if not positive:
                return None
            continue
        kept.append((entry, positive))
    if not kept:
        return Expr(1)
    if len(kept) == 1:
        var, positive = kept[0]
        return Expr(0, {var: 1}) if positive else Expr(1, {var: -1})
    target = m.lm.new_bool(name)
    m.lm.add_and(target, kept)
    return Expr(0, {target: 1})


def set_time_objective(m: RematModel) -> None:
    """Eq. 1: sum over devices, stages and nodes of c[d, k] R[d, t, k] plus the copy times
    w[v, s, d] K[s, d, t, v]; constant terms (fixed computations) stay in the objective."""
    p = m.problem
    objective = Expr()
    for (d, _, k), entry in m.R.items():
        add_entry(objective, entry, p.nodes[k].cost[d])
    for (s, d, _, v), var in m.K.items():
        objective.add_var(var, p.values[v].copy_cost[(s, d)])
    m.lm.minimize(objective)


def set_peak_objective(m: RematModel) -> None:
    """Minimize the peak memory units summed over devices (the inverse query: smallest budget)."""
    objective = Expr()
    for var in m.peak.values():
        objective.add_var(var)
    m.lm.minimize(objective)


def build_model(m: RematModel) -> RematModel:
    add_compute_variables(m)
    add_copy_literals(m)
    add_save_variables(m)
    add_save_needs_availability(m)
    add_inputs_available(m)
    add_copy_sources(m)
    add_no_redundant_recompute(m)
    if m.persistent:
        add_persistent_checkpoints(m)
    if m.memory == "exact":
        add_memory_recurrence(m)
    else:
        add_stage_memory(m)
    if m.objective == "peak":
        set_peak_objective(m)
    else:
        set_time_objective(m)
    m.stats["variables"] = m.lm.num_vars
    m.stats["constraints"] = len(m.lm.constraints) + len(m.lm.ands)
    return m
