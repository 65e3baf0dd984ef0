"""Heuristic schedules of a RematProblem on one device: keep-all, checkpoints, budget-greedy.

One stage-by-stage executor serves three policies. Each stage computes its node after making
every value it reads available, recomputing missing ones just in time (recursively, where the
problem allows the recomputation). A value is dropped once no later first computation reads it
and no pending recomputation needs it; what else is dropped is the policy:

- "keep": nothing else (no recomputation: the keep-everything baseline);
- "checkpoints": during the forward phase every recomputable value outside the `checkpoints`
  nodes is dropped after its last forward read and recomputed when the backward needs it
  (Chen et al.'s segment checkpointing when the checkpoints are every sqrt(n)-th node);
- "greedy": when a stage would exceed the budget, resident values it does not read are evicted,
  largest size x distance to the next read / recompute cost first (a DTR-like rule).

Memory is counted exactly as the stage memory model counts it, so a decision this returns fits
the model's budget; it seeds the CP-SAT search and is the fallback when the search finds nothing.
"""

from __future__ import annotations

import bisect
from collections.abc import Collection
from dataclasses import dataclass
from typing import Literal

from planner.remat.decision import Decision, possible_positions, stage_peak
from planner.remat.problem import RematProblem

Policy = Literal["keep", "checkpoints", "greedy", "hybrid"]


@dataclass(frozen=True)
class ExecutionResult:
    decision: Decision | None
    peak: int  # units under the stage memory model (of the stages executed)
    reason: str = ""


class _Stuck(Exception):
    def __init__(self, value: int, stage: int):
        super().__init__(f"value {value} cannot be recreated in stage {stage}")
        self.value = value


def execute(
    problem: RematProblem, device: str, policy: Policy = "keep", *, budget: int | None = None,
    checkpoints: Collection[int] = (), retries: int = 40, actual: bool = False,
) -> ExecutionResult:
    """Run `policy` on `device` (which must run every node). Decision None when it fails.

    Stage memory is counted as the model counts it, or, with `actual`, freeing each value after
    the last node that does read it in the stage (what the replayed schedule needs; such a
    decision may not fit the model's budget).

    When a recomputation turns out not to be allowed where it is needed, the value is pinned
    (kept until its last possible read) and the run starts again.
    """
    pinned: set[int] = set()
    for _ in range(retries):
        try:
            return _Run(problem, device, policy, budget, set(checkpoints), pinned,
                        actual).run()
        except _Stuck as stuck:
            if stuck.value in pinned:
                break
            pinned.add(stuck.value)
    return ExecutionResult(None, 0, "recomputations the problem does not allow")


class _Run:
    def __init__(self, p: RematProblem, device: str, policy: Policy, budget: int | None,
                 checkpoints: set[int], pinned: set[int], actual: bool = False):
        self.p, self.device, self.policy, self.budget = p, device, policy, budget
        self.actual = actual
        self.checkpoints, self.pinned = checkpoints, pinned
        self.allowed = [set(n.recompute_stages) for n in p.nodes]
        self.reads = [sorted(v.consumers) for v in p.values]
        self.persistent = {v.id for v in p.values if v.kind == "persistent" and device == p.home}
        self.keep_until: dict[int, int] = {}
        small = p.options.tiny_units if len(p.devices) == 1 else -1
        for v in p.values:
            if v.kind == "output":
                self.keep_until[v.id] = p.stages
            elif v.id in pinned or v.size <= small:
                self.keep_until[v.id] = v.last_read

    def next_read(self, v: int, t: int) -> int | None:
        """First computation after stage t that reads v."""
        lst = self.reads[v]
        i = bisect.bisect_right(lst, t)
        return lst[i] if i < len(lst) else None

    def recreatable(self, v: int, after: int) -> bool:
        """v can be recomputed at every first computation after stage `after` that reads it."""
        producer = self.p.values[v].producer
        if producer is None or v in self.keep_until:
            return False
        return all(c in self.allowed[producer] for c in self.reads[v] if c > after)

    def run(self) -> ExecutionResult:
        p, nodes = self.p, self.p.nodes
        values = p.values
        if any(self.device not in n.cost for n in nodes):
            return ExecutionResult(None, 0, f"some node cannot run on {self.device}")
        rows = possible_positions(p, self.device)
        resident = {v.id for v in values if v.producer is None and v.id not in self.persistent
                    and (v.last_read >= 0 or v.kind == "output")}
        evicted: set[int] = set()  # not resident, read by a later first computation
        computes: list[list[tuple[int, str]]] = []
        peak = 0
        for t in range(p.stages):
            stage: set[int] = {t}
            made: set[int] = set(nodes[t].values)
            for u in nodes[t].reads:
                self._ensure(u, t, resident, stage, made)
            read_now = {u for k in stage for u in nodes[k].reads}
            transient: set[int] = set()  # made here, dropped after the stage anyway
            while True:
                after, pending = self._drop_after(t, resident | made,
                                                  (evicted - made) | transient)
                usage = stage_peak(p, self.device, t, rows[t], stage,
                                   dict.fromkeys(resident, 1), after, self.actual)
                if self.budget is None or usage <= self.budget or self.policy not in (
                        "greedy", "hybrid"):
                    break
                excess = usage - self.budget
                if not (self._evict(t, resident, evicted, read_now, excess)
                        or self._drop_made(t, made - transient - set(nodes[t].values),
                                           transient, excess)):
                    return ExecutionResult(None, max(peak, usage), f"over budget in stage {t}")
            peak = max(peak, usage)
            computes.append([(k, self.device) for k in sorted(stage)])
            resident, evicted = after, pending
        return ExecutionResult(Decision(computes), peak)

    def _ensure(self, v: int, t: int, resident: set[int], stage: set[int], made: set[int]
                ) -> None:
        """Make v available in stage t, recomputing its producer (and its unit) just in time."""
        p = self.p
        if v in self.persistent or v in resident or v in made:
            return
        producer = p.values[v].producer
        if producer is None or t not in self.allowed[producer]:
            raise _Stuck(v, t)
        unit = p.nodes[producer].unit
        block = p.units[unit] if unit is not None else (producer,)
        stage.update(block)
        for k in block:
            made.update(p.nodes[k].values)
        for k in block:
            for u in p.nodes[k].reads:
                self._ensure(u, t, resident, stage, made)

    def _drop_after(self, t: int, resident: set[int], evicted: set[int]
                    ) -> tuple[set[int], set[int]]:
        """(values kept into stage t + 1, values dropped that a later stage reads)."""
        p, values, nodes = self.p, self.p.values, self.p.nodes
        evicted = {w for w in evicted if self.next_read(w, t) is not None}
        kept = resident - evicted
        # Values a pending recomputation will read: walk back from the evicted values.
        needed: set[int] = set()
        stack = list(evicted)
        seen = set(stack)
        while stack:
            w = stack.pop()
            producer = values[w].producer
            if producer is None:
                continue
            for u in nodes[producer].reads:
                if u in resident:
                    needed.add(u)
                elif u not in seen and u not in self.persistent:
                    seen.add(u)
                    stack.append(u)
        for v in resident:
            if v in self.keep_until:
                if t >= self.keep_until[v]:
                    kept.discard(v)
                continue
            nxt = self.next_read(v, t)
            if nxt is None:
                if v not in needed or (self.policy in ("checkpoints", "hybrid")
                                       and values[v].producer not in self.checkpoints
                                       and self.recreatable(v, t)):
                    kept.discard(v)
            elif (self.policy in ("checkpoints", "hybrid") and t < p.forward_end
                  and nxt >= p.forward_end
                  and values[v].producer is not None
                  and values[v].producer not in self.checkpoints and self.recreatable(v, t)):
                kept.discard(v)
                evicted.add(v)
        return kept, evicted

    def _evict(self, t: int, resident: set[int], evicted: set[int], read_now: set[int],
               excess: int) -> bool:
        """Evict resident values stage t does not read, about `excess` units' worth: largest
        size x distance to the next read / cost of recomputing it from what stays resident."""
        values = self.p.values
        candidates = []
        memo: dict[int, int] = {}
        for v in resident:
            if v in read_now or not self.recreatable(v, t - 1) or values[v].size == 0:
                continue
            if self.policy == "hybrid" and values[v].producer in self.checkpoints:
                continue
            nxt = self.next_read(v, t - 1)
            if nxt is None:
                nxt = self.p.stages  # kept for a pending recomputation only
            cost = self._rebuild_cost(v, resident, memo) + 1
            candidates.append((-(values[v].size * (nxt - t + 1)) / cost, v))
        if not candidates:
            return False
        candidates.sort()
        freed = 0
        for _, v in candidates:
            if freed >= excess:
                break
            resident.discard(v)
            evicted.add(v)
            freed += values[v].size
        return True

    def _drop_made(self, t: int, made: set[int], transient: set[int], excess: int) -> bool:
        """Do not keep some values recomputed in stage t past it (they are recomputed again when
        read later), largest first."""
        values = self.p.values
        candidates = sorted(
            ((-values[v].size, v) for v in made
             if values[v].size and self.next_read(v, t) is not None and self.recreatable(v, t)),
        )
        if not candidates:
            return False
        freed = 0
        for _, v in candidates:
            if freed >= excess:
                break
            transient.add(v)
            freed += values[v].size
        return True

    def _rebuild_cost(self, v: int, resident: set[int], memo: dict[int, int]) -> int:
        """Cost of recomputing v's producer and every missing value it needs (DTR's evicted
        neighbourhood)."""
        if v in memo:
            return memo[v]
        memo[v] = 0  # cycle guard (values form a DAG)
        producer = self.p.values[v].producer
        assert producer is not None, "only values some node produces are rebuilt"
        node = self.p.nodes[producer]
        total = min(node.cost.values())
        for u in node.reads:
            if u not in resident and u not in self.persistent and self.p.values[u].producer \
                    is not None:
                total += self._rebuild_cost(u, resident, memo)
        memo[v] = total
        return total


def threshold_checkpoints(problem: RematProblem, threshold: int) -> set[int]:
    """Chen et al.'s greedy segmentation: walk the recomputable nodes in order, summing the
    units of their values; a node whose running sum reaches `threshold` becomes a checkpoint
    and the sum restarts (threshold 0: every node, i.e. keep everything)."""
    marks: set[int] = set()
    running = 0
    for node in problem.nodes:
        if not node.recomputable:
            continue
        running += sum(problem.values[v].size for v in node.values)
        if running >= threshold:
            marks.add(node.id)
            running = 0
    return marks


def sqrt_checkpoints(problem: RematProblem) -> set[int]:
    """Every round(sqrt(n))-th recomputable node (Chen et al. 2016): the segment boundaries."""
    recomputable = [n.id for n in problem.nodes if n.recomputable]
    if not recomputable:
        return set()
    step = max(1, round(len(recomputable) ** 0.5))
    return {k for i, k in enumerate(recomputable) if (i + 1) % step == 0}
