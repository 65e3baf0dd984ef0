"""Walk a Schedule once: every materialization of a tensor on a device, and when it is live.

This is the memory model of a schedule, shared by the solvers' cheap check (planner.memory
.simulate) and the plan builder (planner.plan.builder), so that a schedule that fits in one fits
in the other. Each event is a step:

- a compute writes a new materialization of each output on its device; a copy writes one on its
  destination; both read their inputs' current materializations; a free ends one;
- graph inputs and constants are preloaded on their home device before step 0;
- a materialization is live from the step that writes it (step 0 when preloaded) to its last
  read; preloaded constants and state for the whole step; a graph output never freed to the end;
- an in-place update takes over its state's storage (it shares the preloaded state's bytes, see
  `Materialization.alias_of`) when planner.memory.sharing allows the pair, the state was never
  freed and every read of the old value comes at or before the write.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from planner.ir.graph import Graph
from planner.memory.liveness import live_curve, persistent_tensors
from planner.memory.schedule import Compute, Copy, Free, Schedule
from planner.memory.sharing import state_updates, takes_over_storage


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
    alias_of: Materialization | None = None  # the state whose storage it takes over


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

    def final(self) -> dict[tuple[int, str], list[Materialization]]:
        """Every materialization of each (tensor, device), in the order they were written."""
        history: dict[tuple[int, str], list[Materialization]] = {}
        for m in self.materializations:
            history.setdefault((m.tensor, m.device), []).append(m)
        return history

    def peaks(self, alignment: int = 1) -> dict[str, int]:
        """Peak live bytes per device, each materialization rounded up to `alignment` (at least
        one byte: the arena gives every buffer an address); shared storage counted once."""
        ranges: dict[str, list[tuple[int, int, int]]] = {}
        for m in self.materializations:
            if m.alias_of is not None:
                continue
            size = -(-max(self.graph.tensors[m.tensor].nbytes, 1) // alignment) * alignment
            ranges.setdefault(m.device, []).append((*self.live_range(m), size))
        return {device: max(live_curve(r, self.n_steps), default=0)
                for device, r in ranges.items()}


def replay(graph: Graph, schedule: Schedule) -> Replay:
    """Walk `schedule` (see the module doc); a read of a value not held raises KeyError."""
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
        m = current[(tensor, device)]
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
    _share_state_storage(graph, materializations)
    return Replay(graph=graph, schedule=schedule, materializations=tuple(materializations),
                  events=tuple(events), persistent=persistent_tensors(graph))


def _share_state_storage(graph: Graph, materializations: list[Materialization]) -> None:
    """Let each updated state take over its preloaded state's storage where the rule allows."""
    in_place = state_updates(graph).in_place
    preloaded = {(m.tensor, m.device): m for m in materializations if m.preloaded}
    for new in materializations:
        old = preloaded.get((in_place.get(new.tensor, -1), new.device))
        if old is not None and old.freed_at is None and takes_over_storage(old.reads, new.first):
            new.alias_of = old
