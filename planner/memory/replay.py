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
from typing import Literal

from planner.ir.graph import Graph, Op
from planner.memory.schedule import Compute, Copy, Free, Schedule, ScheduleError
from planner.memory.sharing import DATA_IN_PLACE_OPS, VIEW_OPS, Sharing, state_updates
from planner.memory.zones import live_curve, persistent_tensors


@dataclass(eq=False)
class Materialization:
    """One value of a tensor held on one device (the `ordinal`-th there in this schedule)."""

    tensor: int
    device: str
    first: int
    ordinal: int
    preloaded: bool = False
    reads: list[int] = field(default_factory=list)
    freed_at: int | None = None
    storage: Materialization | None = None  # the owner of the bytes it sits in (None: itself)
    shares: Literal["view", "in_place"] | None = None  # how it came to share them

    @property
    def owner(self) -> Materialization:
        return self.storage or self


@dataclass(frozen=True)
class EventIO:
    """What one event reads and writes: a compute's per input / output slot (None where the op
    omits an optional one), a copy's source and destination, a free's freed materialization."""

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

    @property
    def n_steps(self) -> int:
        return len(self.events)

    def holds_for_whole_step(self, m: Materialization) -> bool:
        """Preloaded constants and state: in the persistent zone for the whole step."""
        return m.preloaded and m.tensor in self.persistent

    def live_range(self, m: Materialization) -> tuple[int, int]:
        """Inclusive steps in which `m` occupies bytes (see the module doc)."""
        end = self.n_steps - 1
        if self.holds_for_whole_step(m):
            return 0, end
        if m.freed_at is None and self.graph.tensors[m.tensor].is_graph_output:
            return m.first, end
        return m.first, max([m.first, *m.reads])

    def storage_range(self, owner: Materialization) -> tuple[int, int]:
        """Inclusive steps in which `owner`'s bytes are taken: from its write to the end of the
        last live range among the materializations sitting in them."""
        return owner.first, max(self.live_range(m)[1] for m in self.members[owner])

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
        for m in self.owners:
            size = -(-max(self.graph.tensors[m.tensor].nbytes, 1) // alignment) * alignment
            ranges.setdefault(m.device, []).append((*self.storage_range(m), size))
        return {device: live_curve(r, self.n_steps) for device, r in ranges.items()}

    def peaks(self, alignment: int = 1) -> dict[str, int]:
        """Peak of `live_bytes` per device."""
        return {device: max(curve, default=0)
                for device, curve in self.live_bytes(alignment).items()}


def replay(graph: Graph, schedule: Schedule) -> Replay:
    """Walk `schedule` (see the module doc); a read of a value not held raises ScheduleError."""
    materializations: list[Materialization] = []
    current: dict[tuple[int, str], Materialization] = {}
    counts: dict[tuple[int, str], int] = {}

    def write(tensor: int, device: str, step: int, preloaded: bool = False) -> Materialization:
        key = (tensor, device)
        m = Materialization(tensor, device, step, counts.get(key, 0), preloaded=preloaded)
        counts[key] = m.ordinal + 1
        current[key] = m
        materializations.append(m)
        return m

    def read(tensor: int, device: str, step: int) -> Materialization:
        m = current.get((tensor, device))
        if m is None:
            raise ScheduleError(f"event {step} reads {graph.tensors[tensor].name} on {device}, "
                                "where it does not exist (not a topological order?)")
        m.reads.append(step)
        return m

    for tensor, device in sorted(schedule.home.items()):
        if graph.tensors[tensor].producer is None:
            write(tensor, device, 0, preloaded=True)
    events: list[EventIO] = []
    for step, event in enumerate(schedule.events):
        if isinstance(event, Compute):
            op = graph.ops[event.op]
            reads = tuple(None if t is None else read(t, event.device, step) for t in op.inputs)
            writes = tuple(None if t is None else write(t, event.device, step)
                           for t in op.outputs)
            events.append(EventIO(reads=reads, writes=writes))
        elif isinstance(event, Copy):
            src = read(event.tensor, event.src, step)
            events.append(EventIO(reads=(src,), writes=(write(event.tensor, event.dst, step),)))
        elif isinstance(event, Free):
            freed = current.pop((event.tensor, event.device))
            freed.freed_at = step
            events.append(EventIO(freed=freed))
    walk = Replay(graph=graph, schedule=schedule, materializations=tuple(materializations),
                  events=tuple(events), persistent=persistent_tensors(graph), members={})
    _share_storage(walk)
    return walk


def _share_storage(walk: Replay) -> None:
    """Decide which materializations share storage (see the module doc), into `walk.members`.

    One pass in step order; a state whose update chain was started in place but whose new value
    could not end in its storage is barred and the pass runs again (at most once per state)."""
    barred: set[int] = set()
    while True:
        incomplete = _share_pass(walk, barred)
        if not incomplete:
            return
        barred |= incomplete


def _share_pass(walk: Replay, barred: set[int]) -> set[int]:
    """One decision pass; returns the states whose chain started but did not finish in place."""
    graph, sharing = walk.graph, state_updates(walk.graph)
    for m in walk.materializations:
        m.storage, m.shares = None, None
    members = walk.members
    members.clear()
    for m in walk.materializations:
        if m.preloaded:
            members[m] = [m]
    for step, (event, io) in enumerate(zip(walk.schedule.events, walk.events, strict=True)):
        if not isinstance(event, Compute):
            for copied in io.writes:
                if copied is not None:
                    members[copied] = [copied]
            continue
        op = graph.ops[event.op]
        for w in io.writes:
            if w is None:
                continue
            owner = _storage_for(walk, sharing, op, w, io, step, barred)
            if owner is None:
                members[w] = [w]
                continue
            w.storage = owner
            w.shares = "view" if op.op_type in VIEW_OPS else "in_place"
            members[owner].append(w)
    incomplete = set()
    for owner, inside in members.items():
        state = owner.tensor
        if owner.preloaded and state in sharing.update_chains:
            new = graph.tensors[state].updated_by
            written = {m.tensor for m in inside if m.shares == "in_place"}
            if written and new not in written:
                incomplete.add(state)
    return incomplete


def _storage_for(walk: Replay, sharing: Sharing, op: Op, w: Materialization, io: EventIO,
                 step: int, barred: set[int]) -> Materialization | None:
    """The owner whose storage `w` (written by `op` at `step`) may sit in, or None for its own.
    Among several inputs it could go over, a state's own update chain comes first."""
    if op.op_type in VIEW_OPS:
        source = io.reads[0]
        if w.tensor in sharing.view_source and source is not None:
            return source.owner
        return None
    candidates = sharing.candidates.get(w.tensor, ())
    options = []
    for slot, tensor in enumerate(op.inputs):
        read = io.reads[slot]
        if tensor not in candidates or read is None:
            continue
        owner = read.owner
        if op.op_type in DATA_IN_PLACE_OPS and any(
                r is not None and r.owner is owner for r in io.reads[slot + 1:]):
            continue  # a scatter would read its updates from the bytes it writes
        if _may_overwrite(walk, sharing, owner, w, io, step, barred):
            chain = owner.preloaded and owner.tensor in sharing.update_chains
            options.append((not chain, slot, owner))
    return min(options, key=lambda o: (o[0], o[1]))[2] if options else None


def _may_overwrite(walk: Replay, sharing: Sharing, owner: Materialization, w: Materialization,
                   io: EventIO, step: int, barred: set[int]) -> bool:
    """Whether `w`, written at `step`, may go over the bytes of `owner` (the module doc)."""
    graph = walk.graph
    tensor = graph.tensors[owner.tensor]
    if owner.preloaded:
        chain = sharing.update_chains.get(owner.tensor)
        if chain is None or owner.tensor in barred or w.tensor not in chain:
            return False  # constants, data inputs, and states outside their update chain
    if tensor.nbytes != graph.tensors[w.tensor].nbytes:
        return False
    inside = walk.members[owner]
    if any(m.freed_at is None and graph.tensors[m.tensor].is_graph_output for m in inside):
        return False  # holds a value that must survive the step
    if any(max(m.reads, default=m.first) > step for m in inside):
        return False  # still read later (a later op, or a recomputation)
    if any(r is not None and r.owner is owner and graph.tensors[r.tensor].shape
           != graph.tensors[w.tensor].shape for r in io.reads):
        return False  # the op reads these bytes under another layout
    return True
