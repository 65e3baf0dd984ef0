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
from planner.memory.liveness import outlives_step


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


def sequential_schedule(graph: Graph, order: Sequence[int], device: str) -> Schedule:
    """Every op once, on one device, in `order`; each value freed right after its last read.

    Constants, state and graph outputs are never freed: they outlive the step.
    """
    keep = outlives_step(graph)
    position = {op: k for k, op in enumerate(order)}
    last_read: dict[int, int] = {}
    for t in graph.tensors:
        if t.consumers:
            last_read[t.id] = max(position[c] for c in t.consumers)
    frees_after: dict[int, list[int]] = {}
    for t in graph.tensors:
        if t.id in keep:
            continue
        at = last_read.get(t.id, position.get(t.producer) if t.producer is not None else None)
        if at is not None:
            frees_after.setdefault(at, []).append(t.id)
    unread_inputs = [t for t in graph.inputs if t not in keep and t not in last_read]
    events: list[Event] = [Free(t, device) for t in unread_inputs]
    for k, op in enumerate(order):
        events.append(Compute(op, device))
        events.extend(Free(t, device) for t in sorted(frees_after.get(k, [])))
    return Schedule(events=tuple(events), home=home_on(graph, device))


def home_on(graph: Graph, device: str) -> dict[int, str]:
    """`Schedule.home` with one home device: graph inputs, constants and outputs all on it."""
    return {t.id: device for t in graph.tensors if t.producer is None or t.is_graph_output}
