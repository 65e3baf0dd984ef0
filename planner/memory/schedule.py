"""A schedule: the solvers' output, before buffers get ids and offsets.

A schedule is a list of events over (tensor, device) residency, in the style of Checkmate's
explicit instruction lists:

- `Compute(op, device)`: the op's inputs must be resident on `device`; its outputs become
  resident there (a new materialization; `recompute` marks a rematerialization);
- `Copy(tensor, src, dst)`: a resident tensor gets a second materialization on `dst`;
- `Free(tensor, device)`: the materialization ends.

Graph inputs and constants start resident on their `home` device; graph outputs must be resident
on their home device at the end. planner.memory.replay walks a schedule; planner.plan.builder
turns it into a `schemas.Plan`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from planner.ir.graph import Graph
from planner.memory.zones import outlives_step


@dataclass(frozen=True)
class Compute:
    op: int
    device: str
    recompute: bool = False


@dataclass(frozen=True)
class Copy:
    tensor: int
    src: str
    dst: str


@dataclass(frozen=True)
class Free:
    tensor: int
    device: str


Event = Compute | Copy | Free


@dataclass(frozen=True)
class Schedule:
    events: tuple[Event, ...]
    home: dict[int, str] = field(default_factory=dict)  # graph inputs, constants, outputs


class ScheduleError(RuntimeError):
    """Events read a tensor where it does not exist: a bug in whatever made them."""


def sequential_schedule(graph: Graph, order: Sequence[int], device: str) -> Schedule:
    """Every op once, on one device, in `order`; each value freed right after its last read.

    Constants, state and graph outputs are never freed: they outlive the step.
    """
    home = home_on(graph, device)
    computes: list[Event] = [Compute(op, device) for op in order]
    return Schedule(events=tuple(free_after_last_read(graph, computes, home)), home=home)


def first_computations(schedule: Schedule) -> list[int]:
    """The ops in the order of their first computation: the order `schedule` ran in (a bound
    taken for one order holds for the schedules of that order only)."""
    return list(dict.fromkeys(e.op for e in schedule.events if isinstance(e, Compute)))


def free_after_last_read(graph: Graph, events: Sequence[Event], home: dict[int, str]
                         ) -> list[Event]:
    """`events` (computes and copies) with a Free right after each materialization's last read,
    right after its making when nothing reads it, before the first event for a graph input
    nobody reads; the last materialization of a tensor that outlives the step (planner.memory
    .liveness.outlives_step) on its home device is never freed. (Reads and writes inlined: the
    eviction search and the fill pass call it on every schedule they make.)"""
    made: list[tuple[int, str, int]] = []  # (tensor, device, event index; -1 when preloaded)
    last_use: dict[tuple[int, str, int], int] = {}
    current: dict[tuple[int, str], tuple[int, str, int]] = {}
    ops, tensors = graph.ops, graph.tensors

    for t, device in sorted(home.items()):
        if tensors[t].producer is None:
            m = (t, device, -1)
            made.append(m)
            current[(t, device)] = m
            last_use[m] = -1
    for index, event in enumerate(events):
        if isinstance(event, Compute):
            op, device = ops[event.op], event.device
            for t in op.input_ids:
                read = current.get((t, device))
                if read is None:
                    raise _not_there(graph, t, device, index)
                last_use[read] = index
            for t in op.output_ids:
                m = (t, device, index)
                made.append(m)
                current[(t, device)] = m
                last_use[m] = index
        elif isinstance(event, Copy):
            read = current.get((event.tensor, event.src))
            if read is None:
                raise _not_there(graph, event.tensor, event.src, index)
            last_use[read] = index
            m = (event.tensor, event.dst, index)
            made.append(m)
            current[(event.tensor, event.dst)] = m
            last_use[m] = index
    outlives = outlives_step(graph)
    final = set(current.values())
    frees_after: dict[int, list[tuple[int, str]]] = {}
    for m in made:
        tensor, device, _ = m
        if tensor in outlives and device == home.get(tensor) and m in final:
            continue
        frees_after.setdefault(last_use[m], []).append((tensor, device))
    out: list[Event] = [Free(t, d) for t, d in sorted(frees_after.get(-1, []))]
    for index, event in enumerate(events):
        out.append(event)
        after = frees_after.get(index)
        if after:
            out.extend(Free(t, d) for t, d in sorted(after))
    return out


def _not_there(graph: Graph, tensor: int, device: str, index: int) -> ScheduleError:
    return ScheduleError(f"event {index} reads {graph.tensors[tensor].name} on {device}, "
                         "where it does not exist")


def home_on(graph: Graph, device: str) -> dict[int, str]:
    """`Schedule.home` with one home device: graph inputs, constants and outputs all on it."""
    return {t.id: device for t in graph.tensors if t.producer is None or t.is_graph_output}


def drop_dead_recomputations(g: Graph, events: Sequence[Event], home: dict[int, str]
                             ) -> list[Event]:
    """`events` (computes and copies) without the recomputations and copies none of whose
    outputs is read before it is replaced: a recomputed segment may hold ops nobody needs, and
    a recomputation dropped by a search leaves its inputs' recomputations dead."""
    pending = {(t, home[t]) for t in g.outputs}
    live: list[Event] = []
    for event in reversed(events):
        if isinstance(event, Compute):
            op = g.ops[event.op]
            outs = [(t, event.device) for t in op.output_ids]
            if event.recompute and not any(o in pending for o in outs):
                continue
            pending.difference_update(outs)
            pending.update((t, event.device) for t in op.input_ids)
        elif isinstance(event, Copy):
            if (event.tensor, event.dst) not in pending:
                continue
            pending.discard((event.tensor, event.dst))
            pending.add((event.tensor, event.src))
        live.append(event)
    live.reverse()
    return live
