"""A fast start at any size: simulate the step under a budget, evicting and recomputing (DTR).

Dynamic Tensor Rematerialization (Kirisame et al., ICLR 2021) runs the program as written and,
when an allocation would exceed the budget, evicts resident values, recomputing one when a later
op reads it. Run offline on the whole order, it is a schedule in one linear pass, with no model
to build, so it scales to graphs the stage models (planner.remat.problem) cannot afford.

Here, with the order's future known: the victim is the resident value with the least
recomputation time per byte and per step until its next read (values no op reads again go
first; Belady's rule weighted by cost). The recomputation time is priced by one of two RULES:
the op's own time, or (DTR's evicted neighbourhood, one level deep) the op's time plus that of
remaking its inputs that are gone too. The neighbourhood keeps eviction from cutting a chain of
cheap elementwise values apart and then remaking it link by link through the convolution at its
head (ResNet-CIFAR at persistent + 50%: 1.29x -> 1.19x the keep-everything step); the own time
wins where every op costs about the same (GPT-2-tiny: 1.22x against 1.30x), so both run.

Only outputs of recomputable ops (of the forward phase, or of any phase: planner.remat.problem)
are evicted, only when their next read comes before any state their recomputation would read may
be updated in place (an input the order itself still reads then is resident and read as it is,
so the states it was made from do not count: see _recompute_caps), and values those ops read
that cannot be made again (data inputs, random ops' outputs) stay resident while a recomputation
may need them.
Bytes are counted per storage root (a view adds nothing and is evicted with its root); an output
that may be written over an input dying at its op adds nothing either. The schedule is replayed
exactly by the caller (planner.memory.simulate) and judged there; the fill pass
(planner.remat.fill) then gives back what the count got wrong.
"""

from __future__ import annotations

import math
import time
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from planner.ir.graph import Graph
from planner.memory.schedule import (
    Compute,
    Event,
    Schedule,
    drop_dead_recomputations,
    free_after_last_read,
    home_on,
)
from planner.memory.sharing import Sharing, state_updates
from planner.memory.simulate import simulate
from planner.memory.zones import buffer_bytes, persistent_tensors
from planner.order.just_in_time import deferred
from planner.profile.costs import CostTable
from planner.remat.heuristics import Candidate
from planner.remat.problem import RematOptions, forward_phase, recomputable_anywhere

NEVER = np.iinfo(np.int64).max // 4  # "no later read"
# How a victim's recomputation time is priced (see the module doc).
NEIGHBOURHOOD = "neighbourhood"
OWN = "own"
RULES = (NEIGHBOURHOOD, OWN)
# In the names of schedules: of another of the orders given (then its number), of an order's
# deferred form (see _scan).
OTHER_ORDER = "/order"
LATE = "/late"
# In the names of schedules that evict backward values too.
BACKWARD_TOO = "+bwd"
# The spread of a restart's jitter of the victims' scores (evict_schedule): the log of the factor
# each score is multiplied by has this standard deviation. ResNet-18-narrow at persistent + 30%
# of its activations, twelve restarts each, filled: 0.3 reached 1.289x the keep-everything step
# twice (1.369x unjittered), 0.6 no lower than 1.326x.
JITTER_SIGMA = 0.3
# Nested recomputations one recomputation may need (Python's recursion stays well within).
MAX_DEPTH = 300
# Computations per op of the order a schedule may run before the simulation gives up: past it the
# budget forces chains of recomputations (GPT-2-small ran 10x its ops at 85% of a budget, 216x at
# 80%: 917,576 events, 43 s and gigabytes to simulate and replay).
MAX_RUNS_PER_OP = 12


@dataclass(frozen=True)
class Evicted:
    schedule: Schedule
    overshoot: int  # bytes by which the simulation's own count exceeded the budget at worst


class _Simulation:
    def __init__(self, graph: Graph, order: Sequence[int], device: str, budget: int,
                 costs: CostTable, recomputable: Collection[int], alignment: int,
                 slowest: float, deadline: float, rule: str,
                 jitter: np.random.Generator | None = None):
        self.g, self.order, self.device, self.budget = graph, order, device, budget
        self.jitter = jitter
        self.slowest, self.deadline, self.seconds = slowest, deadline, 0.0
        self.max_events = MAX_RUNS_PER_OP * len(order)
        sharing = state_updates(graph)
        self.candidates = sharing.candidates
        self.root = [sharing.view_root(t.id) for t in graph.tensors]
        position = {op: k for k, op in enumerate(order)}
        n = len(graph.tensors)
        self.size = np.zeros(n, dtype=np.int64)
        for t in graph.tensors:
            if self.root[t.id] == t.id and t.id not in sharing.in_place:
                self.size[t.id] = buffer_bytes(t.nbytes, alignment)
        self.reads = [sorted(position[c] for c in t.consumers) for t in graph.tensors]
        self.cursor = [0] * n  # index into reads[t] of its next read
        self.next_read = np.array([r[0] if r else NEVER for r in self.reads], dtype=np.int64)
        # Per root: the next read of its storage, through itself or any of its views.
        self.storage_next = self.next_read.copy()
        self.cost_of = [c[device] for c in costs.op_seconds]
        self.cost = np.array([0.0 if t.producer is None else self.cost_of[t.producer]
                              for t in graph.tensors])
        self.recomputable = set(recomputable)
        # Per root: what recomputing it would cost now, its evicted inputs' recomputations
        # included (DTR's evicted neighbourhood, one level deep); the roots whose figure
        # changes when it leaves or comes back (outputs of the ops reading it or its views).
        self.remake_cost = self.cost.copy()
        # The same figures and sizes as Python lists: read one at a time (numpy's scalar reads
        # were a quarter of the 20,000-op chain's simulation), the arrays for victim choice.
        self.cost_list: list[float] = self.cost.tolist()
        self.remake_list: list[float] = self.cost.tolist()
        self.size_list: list[int] = self.size.tolist()
        self.made = [False] * n
        self.remake_inputs: list[list[int]] = [[] for _ in range(n)]
        self.dependents: list[list[int]] = [[] for _ in range(n)]
        for op in graph.ops:
            roots = sorted({self.root[x] for x in op.input_ids})
            for out in op.output_ids:
                if self.root[out] == out:
                    self.remake_inputs[out] = roots
                    for x in roots:
                        self.dependents[x].append(out)
        outputs = set(graph.outputs)
        # Views of each root, to evict together.
        self.views: dict[int, list[int]] = {}
        for t in graph.tensors:
            if self.root[t.id] != t.id:
                self.views.setdefault(self.root[t.id], []).append(t.id)
        self.evictable = np.array(
            [t.producer in self.recomputable and t.id not in outputs and self.root[t.id] == t.id
             for t in graph.tensors], dtype=bool)
        # Resident views of each root that could not be made again: the root stays meanwhile.
        self.fixed_views = np.zeros(n, dtype=np.int64)
        self.priced = rule == NEIGHBOURHOOD  # remake_cost kept up to date
        self.cap = _recompute_caps(graph, order, position, self.recomputable, sharing)
        for root, views in self.views.items():
            self.storage_next[root] = min(self.next_read[[root, *views]])
        # Per root: the last read of its storage in the order (through any view).
        self.storage_last = np.array([r[-1] if r else -1 for r in self.reads], dtype=np.int64)
        for root, views in self.views.items():
            self.storage_last[root] = max(self.storage_last[[root, *views]])
        # Values a recomputation may read that cannot be made again (a dropout mask): held
        # until the last read of anything recomputable made from them.
        self.reach = _reach(graph, order, self.recomputable, self.reads)
        self.pinned = {x for op in self.recomputable for x in graph.ops[op].input_ids
                       if not self.evictable[self.root[x]]}
        self.release_at: dict[int, list[int]] = {}
        for x in self.pinned:
            self.release_at.setdefault(self.reach[x], []).append(x)
        # Per root with views, or pinned, or a graph output among them: (its pinned members,
        # whether one is a graph output), for _maybe_release (roots without any: not listed).
        self.holds: dict[int, tuple[tuple[int, ...], bool]] = {}
        for t in graph.tensors:
            root = self.root[t.id]
            if t.id in self.pinned or t.is_graph_output:
                pinned, output = self.holds.get(root, ((), False))
                self.holds[root] = ((*pinned, t.id) if t.id in self.pinned else pinned,
                                    output or t.is_graph_output)
        self.persistent = persistent_tensors(graph)
        self.resident: set[int] = set()
        # Per root: may go now (resident, evictable, no fixed view resident, read again before
        # its recomputation cap). Kept up to date as values come, go and are read: computed
        # over every tensor at each eviction it was a third of the 20,000-op chain's simulation.
        self.eligible = np.zeros(n, dtype=bool)
        self.memory = 0
        self.events: list[Event] = []
        self.done: set[int] = set()
        self.overshoot = 0
        self.now = 0

    def run(self) -> Evicted:
        g = self.g
        home = home_on(g, self.device)
        for t in g.tensors:
            if t.producer is None:
                self._hold(t.id)
        for now, op in enumerate(self.order):
            self.now = now
            self._compute(op, protected=set(g.ops[op].input_ids))
            for x in g.ops[op].input_ids:
                self._advance(x)
            for x in (*g.ops[op].input_ids, *g.ops[op].output_ids):
                self._maybe_release(x)
            for x in self.release_at.get(now, ()):
                self._maybe_release(x)
        kept = drop_dead_recomputations(g, self.events, home)
        schedule = Schedule(tuple(free_after_last_read(g, kept, home)), home)
        return Evicted(schedule, self.overshoot)

    def _compute(self, op: int, protected: set[int], depth: int = 0) -> None:
        """Run `op` (a recomputation if it ran before), making its inputs resident first."""
        g = self.g
        if depth > MAX_DEPTH:
            raise _GaveUp
        outer = protected
        protected = protected | set(g.ops[op].input_ids)
        for x in g.ops[op].input_ids:
            if not self._resident(x):
                self._remake(x, protected, depth)
        new = [t for t in g.ops[op].output_ids if t not in self.resident]
        need = sum(self.size_list[t] for t in new) - self._taken_over(new, outer)
        self._make_room(need, protected)
        self.events.append(Compute(op, self.device, recompute=op in self.done))
        self.done.add(op)
        self.seconds += self.cost_of[op]
        if self.seconds > self.slowest or len(self.events) > self.max_events or (
                len(self.events) % 1024 == 0 and time.perf_counter() > self.deadline):
            raise _GaveUp
        for t in new:
            self._hold(t)

    def _remake(self, tensor: int, protected: set[int], depth: int) -> None:
        root = self.root[tensor]
        if not self._resident(root):
            producer = self.g.tensors[root].producer
            assert producer is not None and producer in self.recomputable, \
                "only outputs of recomputable ops are evicted"
            self._compute(producer, protected | {root}, depth + 1)
        if tensor != root and tensor not in self.resident:
            producer = self.g.tensors[tensor].producer
            assert producer is not None, "a view is made by its view op"
            self._compute(producer, protected | {root}, depth + 1)

    def _taken_over(self, outputs: Sequence[int], outer: set[int]) -> int:
        """Bytes of inputs the op's `outputs` may be written over (planner.memory.sharing's
        in-place rule: the storage has no read after this step, no recomputation may still read
        it, and it need not survive), each storage once; the replay decides exactly."""
        if not any(out in self.candidates for out in outputs):
            return 0
        busy = {self.root[x] for x in outer}
        taken: set[int] = set()
        for out in outputs:
            for x in self.candidates.get(out, ()):
                root = self.root[x]
                if (root not in taken and root not in busy and root in self.resident
                        and root not in self.persistent
                        and self.size_list[root] == self.size_list[out]
                        and self.storage_last[root] <= self.now
                        and self.g.tensors[root].producer is not None
                        and not any(self.g.tensors[m].is_graph_output or m in self.pinned
                                    for m in (root, *self.views.get(root, ())))):
                    taken.add(root)
                    break
        return sum(self.size_list[r] for r in taken)

    def _resident(self, tensor: int) -> bool:
        return tensor in self.resident or tensor in self.persistent

    def _hold(self, tensor: int) -> None:
        self.resident.add(tensor)
        self.made[tensor] = True
        self.memory += self.size_list[tensor]
        self._refresh(tensor)
        if self._fixed_view(tensor):
            self.fixed_views[self.root[tensor]] += 1
            self._refresh(self.root[tensor])
        if self.priced:
            self._reprice(tensor)

    def _drop(self, tensor: int) -> None:
        self.resident.discard(tensor)
        self.memory -= self.size_list[tensor]
        self._refresh(tensor)
        if self._fixed_view(tensor):
            self.fixed_views[self.root[tensor]] -= 1
            self._refresh(self.root[tensor])
        if self.priced:
            self._reprice(tensor)

    def _refresh(self, root: int) -> None:
        """`eligible[root]` again, after what it depends on changed."""
        if self.evictable[root]:
            following = self.storage_next[root]
            self.eligible[root] = (root in self.resident and self.fixed_views[root] == 0
                                   and (following == NEVER or following < self.cap[root]))

    def _reprice(self, tensor: int) -> None:
        """`tensor` came or went: what recomputing each value made from it now costs."""
        made, resident, persistent = self.made, self.resident, self.persistent
        remake = self.remake_list
        for out in self.dependents[tensor]:
            gone = 0.0
            for x in self.remake_inputs[out]:
                # made before and no longer resident: a recomputation makes it again
                if made[x] and x not in resident and x not in persistent:
                    gone += remake[x]
            remake[out] = self.remake_cost[out] = self.cost_list[out] + gone

    def _fixed_view(self, tensor: int) -> bool:
        return self.root[tensor] != tensor and \
            self.g.tensors[tensor].producer not in self.recomputable

    def _make_room(self, need: int, protected: set[int]) -> None:
        """Evict until `need` more bytes fit the budget (or nothing more can go)."""
        excess = self.memory + need - self.budget
        if excess <= 0:
            return
        roots = {self.root[x] for x in protected}
        allowed = self.eligible.copy()
        allowed[list(roots)] = False
        candidates = np.flatnonzero(allowed)
        if len(candidates):
            distance = np.maximum(self.storage_next[candidates] - self.now, 1).astype(np.float64)
            price = self.remake_cost if self.priced else self.cost
            score = price[candidates] / (self.size[candidates] * distance)
            if self.jitter is not None:
                score *= self.jitter.lognormal(0.0, JITTER_SIGMA, len(score))
            for t in candidates[_cheapest_first(score, self.size[candidates], excess)]:
                if excess <= 0:
                    break
                self._evict(int(t))
                excess = self.memory + need - self.budget
        self.overshoot = max(self.overshoot, excess)

    def _evict(self, root: int) -> None:
        self._drop(root)
        for view in self.views.get(root, ()):
            if view in self.resident:
                self._drop(view)

    def _advance(self, tensor: int) -> None:
        """`tensor` was just read by the op at `now`: its next read moves on."""
        reads = self.reads[tensor]
        k = self.cursor[tensor]
        while k < len(reads) and reads[k] <= self.now:
            k += 1
        self.cursor[tensor] = k
        self.next_read[tensor] = reads[k] if k < len(reads) else NEVER
        root = self.root[tensor]
        views = self.views.get(root)
        self.storage_next[root] = (min(self.next_read[[root, *views]]) if views
                                   else self.next_read[root])
        self._refresh(root)

    def _maybe_release(self, tensor: int) -> None:
        """A storage no later op reads through any of its views leaves (the persistent zone and
        graph outputs stay, and so does a storage any of whose views a recomputation may still
        read: a data input stays while a recomputation may read a view of it)."""
        root = self.root[tensor]
        if root not in self.resident or root in self.persistent \
                or self.storage_next[root] != NEVER:  # the next read through any view
            return
        pinned, output = self.holds.get(root, ((), False))
        if not output and all(self.reach[m] <= self.now for m in pinned):
            self._evict(root)


def _cheapest_first(score: np.ndarray, size: np.ndarray, excess: int) -> np.ndarray:
    """Indices of the lowest scores, in order, covering at least `excess` bytes when they can:
    a partial sort (one eviction usually takes one or two victims out of thousands)."""
    k = 8
    while k < len(score):
        head = np.argpartition(score, k)[:k]
        head = head[np.argsort(score[head], kind="stable")]
        if int(size[head].sum()) >= excess:
            return head
        k *= 8
    return np.argsort(score, kind="stable")


# An order whose unevictable bytes (unevictable_peak) exceed the room the budget leaves beside the
# persistent bytes by more than this factor is tried after the others: forward eviction in it
# cannot fit. The estimate is within 1.3x of the replayed figure on GPT-2-small's quick orders;
# on the fixtures' it ranges from 0.2x to 3.6x, mostly where the figures are small.
HOPELESS_FACTOR = 1.3


def ordered_for_eviction(graph: Graph, orders: Sequence[Sequence[int]], budget: int
                         ) -> list[int]:
    """The indices of `orders` in the sequence eviction tries them: as given, except that the
    orders whose values eviction cannot remove leave no room within `budget` go last (see
    unevictable_peak and HOPELESS_FACTOR)."""
    if len(orders) == 1:
        return [0]
    room = budget - sum(graph.tensors[t].nbytes for t in persistent_tensors(graph))
    hopeless = [unevictable_peak(graph, order, forward_phase(graph, order, RematOptions())[0])
                > HOPELESS_FACTOR * room for order in orders]
    return sorted(range(len(orders)), key=hopeless.__getitem__)


def unevictable_peak(graph: Graph, order: Sequence[int], recomputable: Collection[int]) -> int:
    """The most bytes that values eviction cannot remove hold at once in `order`: those made by
    ops outside `recomputable` (gradients, optimizer temporaries), each from its op to the last
    read of its storage (through views), or until an op writes over it in place (the sharing
    rule of planner.memory.sharing where the storage's last read is that op), state and the
    update chains that run in place in `order` left out (live all step in every order; a chain
    written before a read of the old value runs out of place). An estimate, not a bound: whether
    the replay takes each in-place chance also depends on what recomputations read, and the
    steps' own operands are not counted.

    Which order eviction can fit turns on it: GPT-2-small at persistent + 50% of its
    activations, six quick orders: the two whose embedding update runs mid-backward hold 652 MB
    that eviction cannot touch and overshoot the budget by 361 MB; two holding 494 MB overshoot
    by 140 MB (73 of their update chains run out of place); the two holding 309-322 MB fit."""
    position = np.empty(len(graph.ops), dtype=np.int64)
    position[list(order)] = np.arange(len(order))
    sharing = state_updates(graph)
    skip = persistent_tensors(graph) | sharing.in_state - _out_of_place_chains(graph, position)
    end: dict[int, int] = {}  # per storage root: its last read (through any view), or the
    last = len(order) - 1  # last step for a graph output
    for t in graph.tensors:
        if t.consumers or t.is_graph_output:
            root = sharing.view_root(t.id)
            read = last if t.is_graph_output else int(position[list(t.consumers)].max())
            end[root] = max(end.get(root, -1), read)
    taken_at: dict[int, int] = {}  # root -> the step at which an output took its bytes over
    for step, op_id in enumerate(order):
        for out in graph.ops[op_id].output_ids:
            for x in sharing.candidates.get(out, ()):
                root = sharing.view_root(x)
                if root not in skip and root not in taken_at and end.get(root) == step \
                        and graph.tensors[root].producer is not None:
                    taken_at[root] = step
                    break
    change = np.zeros(len(order) + 1, dtype=np.int64)
    for t in graph.tensors:
        if t.producer is None or t.producer in recomputable or t.id in skip \
                or sharing.view_root(t.id) != t.id:
            continue
        start = int(position[t.producer])
        stop = taken_at[t.id] if t.id in taken_at else max(end.get(t.id, start), start) + 1
        change[start] += t.nbytes
        change[max(stop, start + 1)] -= t.nbytes
    return int(np.cumsum(change[:-1]).max(initial=0))


def _out_of_place_chains(graph: Graph, position: np.ndarray) -> frozenset[int]:
    """The values of the update chains that `position` (op -> step) writes before a read of the
    old value (planner.memory.sharing's read-before-update edges): those need bytes of their
    own."""
    sharing = state_updates(graph)
    state_of = {p: state for state, chain in sharing.update_chains.items() for v in chain
                if (p := graph.tensors[v].producer) is not None}
    late = {state_of[w] for r, writers in sharing.edges.items() for w in writers
            if position[r] > position[w] and w in state_of}
    return frozenset().union(*(sharing.update_chains[state] for state in late))


def _reach(graph: Graph, order: Sequence[int], recomputable: set[int],
           reads: Sequence[Sequence[int]]) -> list[int]:
    """Per tensor, the last position at which it or anything recomputable made from it
    (transitively) is read: until then a recomputation may need it."""
    reach = [r[-1] if r else -1 for r in reads]
    for op in reversed(order):
        if op in recomputable:
            last = max((reach[t] for t in graph.ops[op].output_ids), default=-1)
            for x in graph.ops[op].input_ids:
                reach[x] = max(reach[x], last)
    return reach


def _recompute_caps(graph: Graph, order: Sequence[int], position: dict[int, int],
                    recomputable: set[int], sharing: Sharing) -> np.ndarray:
    """Per tensor, the position from which its producer may no longer run again: a state it
    reads may be overwritten in place by its update chain from then on, and a recomputation
    would read the new value (or, replayed, force the whole update out of place).

    Through an input made by another op, the input's own cap counts only where the input may be
    gone: up to the last read of its storage in the order, an input whose cap has passed is
    resident (the simulation evicts a value only while its next read comes before its cap, and
    a value read again is not freed), made before its cap, so read as it is. A recomputation
    at step s is valid when s is before the input's cap or at most its last read. Without this
    a value read late was held as if made from every state upstream of its inputs (GPT-2-tiny
    with Adam: the eviction simulation's smallest replayed peak, any phase evicted, 565,760 B
    -> 525,312 B in the order tuned for keeping everything)."""
    first_write = {state: min(position[p] for v in chain
                              if (p := graph.tensors[v].producer) is not None)
                   for state, chain in sharing.update_chains.items() if chain}
    fixed = persistent_tensors(graph) | set(sharing.in_place)
    last_read: dict[int, int] = {}
    for op in order:
        for x in graph.ops[op].input_ids:
            root = sharing.view_root(x)
            last_read[root] = max(last_read.get(root, -1), position[op])
    op_cap: dict[int, int] = {}
    for op in order:
        if op not in recomputable:
            continue
        caps = [first_write.get(x, NEVER) for x in graph.ops[op].input_ids]
        for x in graph.ops[op].input_ids:
            producer = graph.tensors[x].producer
            if producer is None:
                continue
            cap = op_cap.get(producer, NEVER)
            root = sharing.view_root(x)
            if cap < NEVER and root not in fixed:
                cap = max(cap, last_read.get(root, -1) + 1)
            caps.append(cap)
        op_cap[op] = min(caps, default=NEVER)
    return np.array([NEVER if t.producer is None else op_cap.get(t.producer, NEVER)
                     for t in graph.tensors], dtype=np.int64)


def evict_schedule(graph: Graph, order: Sequence[int], device: str, budget: int,
                   costs: CostTable, recomputable: Collection[int], *, alignment: int = 1,
                   slowest: float = math.inf, deadline: float = math.inf,
                   rule: str = NEIGHBOURHOOD, jitter: np.random.Generator | None = None
                   ) -> Evicted | None:
    """The eviction simulation's schedule of `order` on `device` within `budget` bytes as it
    counts them (see the module doc); `overshoot` > 0 when it could not stay within. None when
    a recomputation chain grows past MAX_DEPTH, the schedule runs more than MAX_RUNS_PER_OP
    computations per op or its time passes `slowest` seconds (the budget is far too small for
    this rule: recomputations then multiply), or `deadline` passes. `jitter`: each victim's
    score is multiplied by a draw of it (lognormal, JITTER_SIGMA), for restarts that look
    beyond the rule's own choices (planner.remat.rematerialize)."""
    try:
        return _Simulation(graph, order, device, budget, costs, recomputable, alignment,
                           slowest, deadline, rule, jitter).run()
    except _GaveUp:
        return None


class _GaveUp(Exception):
    """The simulation stopped early (see evict_schedule)."""


# Budgets the simulation is run at, as factors of the true one, until a replay fits: its count
# errs high on most graphs and low where storage sharing differs from its rule. Lower factors go
# on after the first fit: a schedule that recomputes more gives the fill pass (planner.remat.fill)
# more to choose from, and filling it often ends faster (GPT-2-small at persistent + half its
# activations: 1.12x the keep-everything step from factor 1, 1.02x from factor 0.9).
FACTORS = (1.0, 0.98, 0.95, 0.9, 0.85, 0.8, 0.7, 0.6)
# ... except after a run whose own count overshot the budget by more than this share of it (and
# whose replay did not fit): what it could not evict at its worst step a lower target cannot
# either (UNet-Adam at persistent + 30% of its activations: 32% over, the first order's runs at
# 0.98 replayed the peaks of those at 1, and the scan spent half its time on them; ResNet-18-
# narrow at + 30%: 3.2% over at 1, and the run at 0.98 fit).
HOPELESS_OVERSHOOT = 0.1
# ... until a fitting schedule is this many times slower than the first that fit (the budget
# then forces chains of recomputations; GPT-2-small's step takes 2.8x at factor 0.85, 39x at 0.8).
SLOWEST_KEPT = 4.0


@dataclass(frozen=True)
class Evictions:
    """What evict_candidates found: the replayed schedules within the budget, cheapest first,
    and the smallest replayed peak of any run, within the budget or not (what eviction reaches:
    the budget to name when none fits)."""

    fitting: list[Candidate]
    smallest_peak: int | None


@dataclass
class _Found:
    """The runs' results so far, shared by the runs of one rule (see _factors)."""

    fitting: list[Candidate] = field(default_factory=list)
    smallest_peak: int | None = None

    def replayed(self, peak: int) -> None:
        self.smallest_peak = peak if self.smallest_peak is None else min(self.smallest_peak,
                                                                          peak)


def evict_candidates(graph: Graph, orders: Sequence[Sequence[int]], device: str, budget: int,
                     costs: CostTable, *, alignment: int, deadline: float,
                     jitter: np.random.Generator | None = None) -> Evictions:
    """Replayed eviction schedules within `budget`, cheapest first: those of each of RULES,
    each rule given an equal share of the time left (see _scan), its victims' scores jittered
    by `jitter` (evict_schedule). Past `deadline`, no rule after the first starts: its first
    run would complete whatever the time (at a budget no run meets, the 20,000-op chain's take
    a second each, and a 2 s request was refused after 9 s)."""
    fitting: list[Candidate] = []
    peaks: list[int] = []
    forms = _Forms(graph, orders)
    sequence = ordered_for_eviction(graph, orders, budget)  # the same for every rule
    for k, rule in enumerate(RULES):
        if k and time.perf_counter() > deadline:
            break
        share = (deadline - time.perf_counter()) / (len(RULES) - k)
        found = _scan(graph, forms, sequence, device, budget, costs, alignment,
                      time.perf_counter() + share, rule, first=not fitting, jitter=jitter)
        fitting += found.fitting
        peaks += [] if found.smallest_peak is None else [found.smallest_peak]
    return Evictions(sorted(fitting, key=lambda c: c.seconds), min(peaks, default=None))


def source_orders(graph: Graph, orders: Sequence[Sequence[int]],
                  candidates: Sequence[Candidate]) -> list[list[int]]:
    """The orders (of `orders` and their deferred forms) that `candidates` of evict_candidates
    were simulated in, each once: a bound reported beside them must hold in all of these."""
    used: dict[tuple[int, ...], None] = {}
    for candidate in candidates:
        number = 0
        if OTHER_ORDER in candidate.name:
            number = int(candidate.name.split(OTHER_ORDER)[1].split("/")[0])
        order = list(orders[number])
        used.setdefault(tuple(deferred(graph, order) if LATE in candidate.name else order))
    return [list(o) for o in used]


class _Forms:
    """The orders given and, made when first asked for, their deferred forms: None when
    deferring moves nothing (a chain), not to be run twice."""

    def __init__(self, graph: Graph, orders: Sequence[Sequence[int]]):
        self.graph, self.orders = graph, [list(o) for o in orders]
        self._late: dict[int, list[int] | None] = {}

    def late(self, number: int) -> list[int] | None:
        """The deferred form of order `number`, None when it is the order itself."""
        if number not in self._late:
            order = self.orders[number]
            late = deferred(self.graph, order)
            self._late[number] = late if late != order else None
        return self._late[number]


def _scan(graph: Graph, forms: _Forms, sequence: Sequence[int], device: str, budget: int,
          costs: CostTable, alignment: int, deadline: float, rule: str, first: bool,
          jitter: np.random.Generator | None = None) -> _Found:
    """One rule's replayed schedules within `budget`, and the smallest peak replayed. Each of
    the orders in turn (the next only when the ones before gave nothing: an order tuned for
    keeping everything can leave more than the budget that eviction cannot touch), evicting
    forward values only; when that gives nothing, the same evicting backward values too (a
    gradient made long before its read; planner.remat.problem.recomputable_anywhere), before the
    next order is tried (UNet-Adam near its smallest budget: backward eviction in the chosen
    order fits, no other order's forward eviction does, and trying those first spent the time).
    A fit that evicts backward values does not end the scan: the next orders' forward eviction
    goes on (UNet-Adam at persistent + 30% of its activations: backward eviction in the first
    order, filled, 1.76-1.90x the keep-everything step; forward eviction in the fourth 1.48x).
    Each order runs as itself and deferred (planner.order.just_in_time.deferred: which of the
    two evicts better depends on the graph, so their runs alternate), each at the FACTORS of the
    budget until a fitting schedule is SLOWEST_KEPT times slower than the first, a lower factor
    stops lowering the replayed peak, or `deadline` passes (with `first`, the first run always
    completes). The orders are tried in `sequence` (ordered_for_eviction: those that leave no
    room for eviction go last)."""
    found = _Found()
    anywhere = recomputable_anywhere(graph)
    label = "" if rule == NEIGHBOURHOOD else f"-{rule}"
    for number in sequence:
        order = forms.orders[number]
        forward, _ = forward_phase(graph, order, RematOptions())
        for scope in ("", BACKWARD_TOO):
            if any(BACKWARD_TOO not in c.name for c in found.fitting):
                return found
            if scope and (found.fitting or anywhere == forward):
                continue  # only forward eviction in the orders after one whose backward fits
            name = f"evict{label}{scope}@{{factor:g}}" + (
                f"{OTHER_ORDER}{number}" if number else "")
            recomputable = anywhere if scope else forward
            runs = [_factors(graph, order, device, budget, costs, alignment, deadline, rule,
                             recomputable, name, found, complete=first, jitter=jitter),
                    _deferred_factors(forms, number, device, budget, costs, alignment,
                                      deadline, rule, recomputable, name + LATE, found,
                                      jitter)]
            first = False
            while runs:
                for run in list(runs):
                    if not next(run, False):
                        runs.remove(run)
                    elif time.perf_counter() > deadline:
                        return found
    return found


def _deferred_factors(forms: _Forms, number: int, device: str, budget: int, costs: CostTable,
                      alignment: int, deadline: float, rule: str,
                      recomputable: Collection[int], name: str, found: _Found,
                      jitter: np.random.Generator | None = None) -> Iterator[bool]:
    """_factors on the deferred form of order `number`, made only when its first run is due
    within `deadline` (0.2 s on the 20,000-op chain, where it is the order itself)."""
    if time.perf_counter() > deadline:
        return
    late = forms.late(number)
    if late is not None:
        yield from _factors(forms.graph, late, device, budget, costs, alignment, deadline,
                            rule, recomputable, name, found, complete=False, jitter=jitter)


def _factors(graph: Graph, order: Sequence[int], device: str, budget: int, costs: CostTable,
             alignment: int, deadline: float, rule: str, recomputable: Collection[int],
             name: str, found: _Found, complete: bool,
             jitter: np.random.Generator | None = None) -> Iterator[bool]:
    """The runs of one order at the FACTORS of `budget`, one per step of the iteration (True
    while more may follow), adding each that fits to `found` (shared by the orders run
    alongside: the first to fit sets how slow the others may be); with `complete`, the first
    run ignores the deadline. See _scan for the stops; besides, no lower factor follows a run
    that overshoots the budget in its replay and, by more than HOPELESS_OVERSHOOT of it, in its
    own count."""
    fitting = found.fitting
    floor: int | None = None
    for number, factor in enumerate(FACTORS):
        if time.perf_counter() > deadline and not (complete and not number):
            return
        slowest = SLOWEST_KEPT * min(c.seconds for c in fitting) if fitting else math.inf
        evicted = evict_schedule(graph, order, device, int(budget * factor), costs,
                                 recomputable, alignment=alignment, slowest=slowest,
                                 deadline=math.inf if complete and not number else deadline,
                                 rule=rule, jitter=jitter)
        if evicted is None:
            if fitting:
                return
            yield True
            continue
        stats = simulate(graph, evicted.schedule, costs, alignment=alignment)
        found.replayed(stats.peaks[device])
        if stats.fits({device: budget}):
            fitting.append(Candidate(name.format(factor=factor), None, None,
                                     evicted.schedule, stats))
        elif (evicted.overshoot > HOPELESS_OVERSHOOT * budget
              or (floor is not None and stats.peaks[device] >= floor)):
            return  # what is left is what eviction cannot touch in this order
        floor = stats.peaks[device] if floor is None else min(floor, stats.peaks[device])
        yield True
