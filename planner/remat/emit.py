"""Turn per-stage decisions into a `planner.memory.schedule.Schedule` of compute / copy / free
events.

Within a stage the chosen nodes run in node order (each node's ops in order; later runs of an op
are marked `recompute`). A copy runs as soon as its source holds the value: at the start of the
stage when it was kept there, right after its computation when it is made in the stage.

Then two passes that only ever lower time and memory:
- dead-code elimination: a recomputation (or copy) none of whose outputs is read before it is
  replaced is dropped (a recomputed segment may hold ops the stage does not need);
- liveness: every materialization is freed right after its last read (right after it is made
  when nothing reads it), except state, constants and graph outputs on the home device, which
  outlive the step. Graph inputs nobody reads are freed first, as in `sequential_schedule`.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.ir.graph import Graph
from planner.memory.liveness import outlives_step
from planner.memory.schedule import Compute, Copy, Event, Free, Schedule, home_on
from planner.remat.decision import Decision
from planner.remat.problem import RematProblem


class EmitError(RuntimeError):
    """The decisions read a tensor where it does not exist: a solver bug."""


def emit_schedule(problem: RematProblem, decision: Decision) -> Schedule:
    p, g = problem, problem.graph
    done: set[int] = set()
    skeleton: list[Event] = []
    for t, computes in enumerate(decision.computes):
        made_here = {(v, d) for k, d in computes for v in p.nodes[k].values}
        after: dict[tuple[int | None, str], list[tuple[int, str, str]]] = {}  # by producer
        for v, src, dst in decision.copies[t] if t < len(decision.copies) else []:
            producer = p.values[v].producer
            if (v, src) in made_here:
                after.setdefault((producer, src), []).append((v, src, dst))
            else:
                skeleton.extend(Copy(x, src, dst) for x in p.values[v].tensors)
        for k, d in sorted(computes):
            for op in p.nodes[k].ops:
                skeleton.append(Compute(op, d, recompute=op in done))
                done.add(op)
            for v, src, dst in after.get((k, d), []):
                skeleton.extend(Copy(x, src, dst) for x in p.values[v].tensors)
    home = home_on(g, p.home)
    kept = _drop_dead(g, skeleton, home)
    return Schedule(events=tuple(with_frees(g, kept, home)), home=home)


def _drop_dead(g: Graph, events: list[Event], home: dict[int, str]) -> list[Event]:
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


@dataclass
class _Mat:
    tensor: int
    device: str
    created: int  # event index, -1 for preloaded
    last_read: int = -1


def with_frees(g: Graph, events: list[Event], home: dict[int, str]) -> list[Event]:
    outlives = outlives_step(g)
    current: dict[tuple[int, str], _Mat] = {}
    mats: list[_Mat] = []

    def make(tensor: int, device: str, index: int) -> None:
        m = _Mat(tensor, device, index)
        current[(tensor, device)] = m
        mats.append(m)

    def read(tensor: int, device: str, index: int) -> None:
        m = current.get((tensor, device))
        if m is None:
            raise EmitError(f"event {index} reads {g.tensors[tensor].name} on {device}, where "
                            "it does not exist")
        m.last_read = index

    for t, device in sorted(home.items()):
        if g.tensors[t].producer is None:
            make(t, device, -1)
    for index, event in enumerate(events):
        if isinstance(event, Compute):
            op = g.ops[event.op]
            for t in op.input_ids:
                read(t, event.device, index)
            for t in op.output_ids:
                make(t, event.device, index)
        elif isinstance(event, Copy):
            read(event.tensor, event.src, index)
            make(event.tensor, event.dst, index)
    final = {id(m) for m in current.values()}
    frees_after: dict[int, list[tuple[int, str]]] = {}
    for m in mats:
        if m.tensor in outlives and m.device == home.get(m.tensor) and id(m) in final:
            continue
        at = max(m.created, m.last_read)
        frees_after.setdefault(at, []).append((m.tensor, m.device))
    out: list[Event] = [Free(t, d) for t, d in sorted(frees_after.get(-1, []))]
    for index, event in enumerate(events):
        out.append(event)
        out.extend(Free(t, d) for t, d in sorted(frees_after.get(index, [])))
    return out
