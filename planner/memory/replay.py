"""Walk a Schedule once: every materialization of a tensor on a device, its storage, and when
it is live.

This is the memory model of a schedule, shared by the solvers' cheap check (planner.memory
.simulate), the orders' live bytes (planner.memory.liveness) and the plan builder
(planner.plan.builder), so that a schedule that fits in one fits in the others. Each event is a
step:

- a compute writes a new materialization of each output on its device; a copy writes one on its
  destination; both read their inputs' current materializations; a free ends one;
- graph inputs and constants are preloaded on their home device before step 0;
- a materialization is live from the step that writes it (step 0 when preloaded) to its last
  read; preloaded constants and state for the whole step; a graph output never freed to the end;
- storage (planner.memory.sharing): a view shares its source's storage; an in-place candidate
  takes over the storage of an input when every materialization in that storage has no read
  after the writing step and none must survive (a constant, a data input, a graph output held
  to the end, a state overwritten by anything but its own update chain). A storage is live from
  its owner's write to the end of the last live range among its materializations. A state's
  chain runs in place only if its new value ends in the state's storage; otherwise none of it
  does (the runtime then copies the new value over the state between steps).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, NamedTuple

from planner.ir.aliasing import SINGLE_INPUT_IN_PLACE_OPS, VIEW_OPS
from planner.ir.graph import Graph, Op
from planner.memory.schedule import Compute, Copy, Free, Schedule, ScheduleError
from planner.memory.sharing import Sharing, state_updates
from planner.memory.zones import buffer_bytes, live_curve, persistent_tensors


@dataclass(eq=False, slots=True)
class Materialization:
    """One value of a tensor held on one device (the `ordinal`-th there in this schedule).
    Slotted: a 20,000-op schedule makes tens of thousands, and every phase reads them."""

    tensor: int
    device: str
    first: int
    ordinal: int
    preloaded: bool = False
    reads: list[int] = field(default_factory=list)  # steps, in increasing order
    freed_at: int | None = None
    storage: Materialization | None = None  # the owner of the bytes it sits in (None: itself)
    shares: Literal["view", "in_place"] | None = None  # how it came to share them

    @property
    def owner(self) -> Materialization:
        return self.storage or self

    @property
    def last_use(self) -> int:
        """Its write or its last read, whichever is later (reads are appended in step order)."""
        return max(self.first, self.reads[-1]) if self.reads else self.first


class EventIO(NamedTuple):
    """What one event reads and writes: a compute's per input / output slot (None where the op
    omits an optional one), a copy's source and destination, a free's freed materialization.
    (A tuple: one per event, made far faster than a frozen dataclass.)"""

    reads: tuple[Materialization | None, ...] = ()
    writes: tuple[Materialization | None, ...] = ()
    freed: Materialization | None = None


@dataclass(frozen=True)
class Replay:
    graph: Graph
    schedule: Schedule
    materializations: tuple[Materialization, ...]  # in the order they are written
    events: tuple[EventIO, ...]  # one per schedule event
    persistent: frozenset[int]  # constants and state tensor ids
    members: dict[Materialization, list[Materialization]]  # owner -> everything in its storage
    # materialization -> the last step of its live_range (computed once, after the walk)
    live_ends: dict[Materialization, int] = field(default_factory=dict)
    # owner -> the last step of its storage_range (computed once, with the storage decisions)
    storage_ends: dict[Materialization, int] = field(default_factory=dict)

    @property
    def n_steps(self) -> int:
        return len(self.events)

    def holds_for_whole_step(self, m: Materialization) -> bool:
        """Preloaded constants and state: in the persistent zone for the whole step."""
        return m.preloaded and m.tensor in self.persistent

    def live_range(self, m: Materialization) -> tuple[int, int]:
        """Inclusive steps in which `m` occupies bytes (see the module doc and _live_ends)."""
        return m.first, self.live_ends[m]

    def storage_range(self, owner: Materialization) -> tuple[int, int]:
        """Inclusive steps in which `owner`'s bytes are taken: from its write to the end of the
        last live range among the materializations sitting in them."""
        return owner.first, self.storage_ends[owner]

    @property
    def owners(self) -> list[Materialization]:
        return [m for m in self.materializations if m.storage is None]

    def final(self) -> dict[tuple[int, str], list[Materialization]]:
        """Every materialization of each (tensor, device), in the order they were written."""
        history: dict[tuple[int, str], list[Materialization]] = {}
        for m in self.materializations:
            history.setdefault((m.tensor, m.device), []).append(m)
        return history

    def live_bytes(self, alignment: int = 1) -> dict[str, list[int]]:
        """Live bytes per device at every step, each storage rounded up to `alignment` (at least
        one byte: the arena gives every buffer an address) and counted once."""
        ranges: dict[str, list[tuple[int, int, int]]] = {}
        tensors, ends = self.graph.tensors, self.storage_ends
        for m in self.owners:
            size = buffer_bytes(tensors[m.tensor].nbytes, alignment)
            ranges.setdefault(m.device, []).append((m.first, ends[m], size))
        return {device: live_curve(r, self.n_steps) for device, r in ranges.items()}

    def peaks(self, alignment: int = 1) -> dict[str, int]:
        """Peak of `live_bytes` per device."""
        return {device: max(curve, default=0)
                for device, curve in self.live_bytes(alignment).items()}


def replay(graph: Graph, schedule: Schedule) -> Replay:
    """Walk `schedule` (see the module doc); a read of a value not held raises ScheduleError.

    The last walk is kept: the remat search replays the schedule it picks (planner.memory
    .simulate) and the plan builder then replays that same object again (0.15 s of the
    20,000-op chain's request). A Schedule and a Graph are not changed once made, and no caller
    changes a Replay, so the same objects give the same walk. One slot: at most one walk is
    held (`forget_last_replay` drops it when a request ends)."""
    global _last
    last = _last
    if last is not None and last.schedule is schedule and last.graph is graph:
        return last
    walk = _walk(graph, schedule)
    _last = walk
    return walk


_last: Replay | None = None


def forget_last_replay() -> None:
    """Drop the walk `replay` keeps, and the schedule and graph it holds."""
    global _last
    _last = None


def _walk(graph: Graph, schedule: Schedule) -> Replay:
    """`replay` without the slot: one loop with its reads and writes inlined (it runs over
    every event of every schedule the planner judges or builds)."""
    materializations: list[Materialization] = []
    current: dict[tuple[int, str], Materialization] = {}
    counts: dict[tuple[int, str], int] = {}
    ops, tensors = graph.ops, graph.tensors

    def missing(tensor: int, device: str, step: int) -> ScheduleError:
        return ScheduleError(f"event {step} reads {tensors[tensor].name} on {device}, where it "
                             "does not exist (not a topological order?)")

    for tensor, device in sorted(schedule.home.items()):
        if tensors[tensor].producer is None:
            key = (tensor, device)
            m = Materialization(tensor, device, 0, counts.get(key, 0), preloaded=True)
            counts[key] = m.ordinal + 1
            current[key] = m
            materializations.append(m)
    events: list[EventIO] = []
    for step, event in enumerate(schedule.events):
        if isinstance(event, Compute):
            op, device = ops[event.op], event.device
            reads: list[Materialization | None] = []
            for t in op.inputs:
                if t is None:
                    reads.append(None)
                    continue
                held = current.get((t, device))
                if held is None:
                    raise missing(t, device, step)
                held.reads.append(step)
                reads.append(held)
            writes: list[Materialization | None] = []
            for t in op.outputs:
                if t is None:
                    writes.append(None)
                    continue
                key = (t, device)
                ordinal = counts.get(key, 0)
                counts[key] = ordinal + 1
                m = current[key] = Materialization(t, device, step, ordinal)
                materializations.append(m)
                writes.append(m)
            events.append(EventIO(tuple(reads), tuple(writes)))
        elif isinstance(event, Copy):
            src = current.get((event.tensor, event.src))
            if src is None:
                raise missing(event.tensor, event.src, step)
            src.reads.append(step)
            key = (event.tensor, event.dst)
            ordinal = counts.get(key, 0)
            counts[key] = ordinal + 1
            dst = current[key] = Materialization(event.tensor, event.dst, step, ordinal)
            materializations.append(dst)
            events.append(EventIO((src,), (dst,)))
        elif isinstance(event, Free):
            freed = current.pop((event.tensor, event.device))
            freed.freed_at = step
            events.append(EventIO(freed=freed))
    walk = Replay(graph=graph, schedule=schedule, materializations=tuple(materializations),
                  events=tuple(events), persistent=persistent_tensors(graph), members={})
    walk.live_ends.update(_live_ends(walk))
    _share_storage(walk)
    return walk


def _live_ends(walk: Replay) -> dict[Materialization, int]:
    """The last step each materialization occupies bytes in (the module doc): the last step
    for preloaded constants and state, and for a graph output never freed; else its last use.
    (A preloaded one starts at step 0, so its live range is the whole step.)"""
    end, tensors, whole_step = walk.n_steps - 1, walk.graph.tensors, walk.holds_for_whole_step
    return {m: end if whole_step(m) or (m.freed_at is None and tensors[m.tensor].is_graph_output)
            else m.last_use for m in walk.materializations}


def _share_storage(walk: Replay) -> None:
    """Decide which materializations share storage (see the module doc), into `walk.members`,
    and where each storage ends, into `walk.storage_ends`.

    One pass in step order; a state whose update chain was started in place but whose new value
    could not end in its storage is barred and the pass runs again (at most once per state)."""
    barred: set[int] = set()
    while True:
        incomplete = _share_pass(walk, barred)
        if not incomplete:
            break
        barred |= incomplete
    ends, live = walk.storage_ends, walk.live_ends
    ends.clear()
    for owner, inside in walk.members.items():
        ends[owner] = live[owner] if len(inside) == 1 else max(map(live.__getitem__, inside))


@dataclass
class _Storages:
    """The storages decided so far in one pass: their members, and for each the latest step any
    member is written or read (`latest_use`) and whether one holds a value that must survive
    the step (`keeps`, a graph output never freed), kept up to date as members join so that the
    in-place test does not walk a storage's members again at every write. (Only the storages
    that need it are recorded: most have one member, whose own last use is the latest.)"""

    graph: Graph
    members: dict[Materialization, list[Materialization]]
    latest: dict[Materialization, int] = field(default_factory=dict)  # owners of 2+ members
    keeping: set[Materialization] = field(default_factory=set)  # owners of a survivor

    def own(self, m: Materialization) -> None:
        self.members[m] = [m]
        if self._must_survive(m):
            self.keeping.add(m)

    def join(self, owner: Materialization, m: Materialization) -> None:
        self.members[owner].append(m)
        self.latest[owner] = max(self.latest_use(owner), m.last_use)
        if self._must_survive(m):
            self.keeping.add(owner)

    def latest_use(self, owner: Materialization) -> int:
        latest = self.latest.get(owner)
        return owner.last_use if latest is None else latest

    def keeps(self, owner: Materialization) -> bool:
        return owner in self.keeping

    def _must_survive(self, m: Materialization) -> bool:
        return m.freed_at is None and self.graph.tensors[m.tensor].is_graph_output


def _share_pass(walk: Replay, barred: set[int]) -> set[int]:
    """One decision pass; returns the states whose chain started but did not finish in place."""
    graph, sharing = walk.graph, state_updates(walk.graph)
    members = walk.members
    members.clear()
    storages = _Storages(graph, members)
    preloaded = []
    for m in walk.materializations:
        m.storage, m.shares = None, None
        if m.preloaded:
            storages.own(m)
            preloaded.append(m)
    for step, (event, io) in enumerate(zip(walk.schedule.events, walk.events, strict=True)):
        if not isinstance(event, Compute):
            for copied in io.writes:
                if copied is not None:
                    storages.own(copied)
            continue
        op = graph.ops[event.op]
        view = op.op_type in VIEW_OPS
        for w in io.writes:
            if w is None:
                continue
            if not view and w.tensor not in sharing.candidates:
                storages.own(w)  # nothing it could go over (the common case)
                continue
            owner = _storage_for(walk, sharing, storages, op, w, io, step, barred)
            if owner is None:
                storages.own(w)
                continue
            w.storage = owner
            w.shares = "view" if view else "in_place"
            storages.join(owner, w)
    incomplete = set()
    for owner in preloaded:  # a state's storage is owned by its preloaded value
        state = owner.tensor
        if state in sharing.update_chains:
            new = graph.tensors[state].updated_by
            written = {m.tensor for m in members[owner] if m.shares == "in_place"}
            if written and new not in written:
                incomplete.add(state)
    return incomplete


def _storage_for(walk: Replay, sharing: Sharing, storages: _Storages, op: Op, w: Materialization,
                 io: EventIO, step: int, barred: set[int]) -> Materialization | None:
    """The owner whose storage `w` (written by `op` at `step`) may sit in, or None for its own.
    Among several inputs it could go over, a state's own update chain comes first."""
    if op.op_type in VIEW_OPS:
        source = io.reads[0]
        if w.tensor in sharing.view_source and source is not None:
            return source.owner
        return None
    candidates = sharing.candidates.get(w.tensor, ())
    if not candidates:
        return None
    options = []
    for slot, tensor in enumerate(op.inputs):
        read = io.reads[slot]
        if tensor not in candidates or read is None:
            continue
        owner = read.owner
        if op.op_type in SINGLE_INPUT_IN_PLACE_OPS and any(
                r is not None and r.owner is owner
                for k, r in enumerate(io.reads) if k != slot):
            continue  # a scatter (Gemm) would read its updates (factors) from the bytes it writes
        if _may_overwrite(walk, sharing, storages, owner, w, io, step, barred):
            chain = owner.preloaded and owner.tensor in sharing.update_chains
            options.append((not chain, slot, owner))
    return min(options, key=lambda o: (o[0], o[1]))[2] if options else None


def _may_overwrite(walk: Replay, sharing: Sharing, storages: _Storages, owner: Materialization,
                   w: Materialization, io: EventIO, step: int, barred: set[int]) -> bool:
    """Whether `w`, written at `step`, may go over the bytes of `owner` (the module doc)."""
    graph = walk.graph
    tensor = graph.tensors[owner.tensor]
    if owner.preloaded:
        chain = sharing.update_chains.get(owner.tensor)
        if chain is None or owner.tensor in barred or w.tensor not in chain:
            return False  # constants, data inputs, and states outside their update chain
    if tensor.nbytes != graph.tensors[w.tensor].nbytes:
        return False
    if storages.keeps(owner):
        return False  # holds a value that must survive the step
    if storages.latest_use(owner) > step:
        return False  # still read later (a later op, or a recomputation)
    if any(r is not None and r.owner is owner and graph.tensors[r.tensor].shape
           != graph.tensors[w.tensor].shape for r in io.reads):
        return False  # the op reads these bytes under another layout
    return True
