"""Turn a schedule into a `schemas.Plan`: buffers with ids and lifetimes, steps, arena layouts.

A buffer is one materialization of planner.memory.replay, with its live range and storage from
there: a view or an in-place write names the buffer owning the bytes it sits in (schema version
2); an updated state whose chain did not run in place is a buffer of its own (the runtime then
copies it into the state's buffer between steps).

Each device's storages (owners, over the union of their buffers' live ranges) are then laid out
in one arena by planner.layout; the plan reports the arena next to the live-bytes lower bound.

The buffers and steps are made without pydantic's validation (`_trusted`): the builder computes
every field itself, and planner.plan.validate re-checks the whole plan independently.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from pydantic import BaseModel

from planner.ir.graph import Graph
from planner.layout import Buffer, Layout, plan_layout
from planner.memory.replay import Materialization, Replay, replay
from planner.memory.schedule import Compute, Copy, Free, Schedule
from planner.memory.sharing import state_updates
from schemas.plan import (
    BufferSpec,
    ComputeStep,
    CopyStep,
    DevicePlan,
    FreeStep,
    Plan,
    PlanRequest,
    SolverReport,
)

PERSISTENT: Final = "persistent"
Model = TypeVar("Model", bound=BaseModel)


@dataclass(frozen=True)
class BuiltPlan:
    plan: Plan
    layouts: dict[str, Layout]


def build_plan(
    graph: Graph,
    schedule: Schedule,
    request: PlanRequest,
    *,
    plan_id: str,
    planner_version: str,
    solvers: Sequence[SolverReport] = (),
    predicted_seconds: float | None = None,
    layout_time_limit: float = 10.0,
    known_offsets: Mapping[str, Mapping[str, int]] | None = None,
) -> BuiltPlan:
    """The plan of `schedule`: its buffers laid out per device (planner.layout.choose
    .plan_layout, given `known_offsets[device]` where a layout of them was kept before)."""
    walk = replay(graph, schedule)
    name = {m: _buffer_id(graph, m) for m in walk.materializations}
    owners: dict[str, list[Materialization]] = {}
    for m in walk.owners:
        owners.setdefault(m.device, []).append(m)

    layouts: dict[str, Layout] = {}
    reports = list(solvers)  # the caller's phases, then one layout report per device
    devices = []
    for device, budget in request.budgets.items():
        mine = owners.get(device, [])
        layout = plan_layout(
            [_layout_buffer(graph, walk, m, name[m]) for m in mine],
            alignment=request.alignment,
            time_limit=layout_time_limit,
            workers=request.workers,
            seed=request.seed,
            known=(known_offsets or {}).get(device),
        )
        layouts[device] = layout
        reports.append(SolverReport(
            phase="layout", device=device, method=layout.method, status=layout.status,
            objective=layout.arena_size, bound=layout.lower_bound, gap=layout.gap,
            seconds=layout.solve_seconds,
        ))
        devices.append(DevicePlan(
            device=device,
            budget_bytes=budget,
            arena_bytes=layout.arena_size,
            lower_bound_bytes=layout.live_bytes_bound,
            persistent_bytes=sum(graph.tensors[m.tensor].nbytes for m in mine
                                 if walk.holds_for_whole_step(m)),
        ))

    first, last = _first_and_last(walk)
    updates = state_updates(graph)
    plan = Plan.model_validate({
        "plan_id": plan_id,
        "planner_version": planner_version,
        "model_sha256": graph.model_sha256,
        "optimized_graph": graph.optimized,
        "request": request,
        "devices": devices,
        "buffers": [],
        "steps": [],
        "graph_inputs": {graph.tensors[t].name: name[first[t, schedule.home[t]]]
                         for t in graph.inputs},
        "graph_outputs": {graph.tensors[t].name: name[last[t, schedule.home[t]]]
                          for t in graph.outputs},
        "constants": {t.name: name[first[t.id, schedule.home[t.id]]]
                      for t in graph.tensors if t.is_initializer},
        "state_updates": {graph.tensors[t].name: graph.tensors[new].name
                          for t in sorted(updates.persistent)
                          if (new := graph.tensors[t].updated_by) is not None},  # all of them
        "predicted_seconds": predicted_seconds,
        "solvers": reports,
    }).model_copy(update={  # made trusted (see _trusted), not validated again
        "buffers": _buffers(graph, walk, name, layouts),
        "steps": _steps(graph, walk, name),
    })
    return BuiltPlan(plan=plan, layouts=layouts)


def _buffer_id(graph: Graph, m: Materialization) -> str:
    """`tensor@device`, with `#k` for the k-th rematerialization or copy there."""
    return f"{graph.tensors[m.tensor].name}@{m.device}" + (f"#{m.ordinal}" if m.ordinal else "")


def _layout_buffer(graph: Graph, walk: Replay, m: Materialization, buffer_id: str) -> Buffer:
    first, last = walk.storage_range(m)
    whole_step = walk.holds_for_whole_step(m)
    return Buffer(id=buffer_id, lower=first, upper=last + 1,
                  size=max(graph.tensors[m.tensor].nbytes, 1),
                  zone=PERSISTENT if whole_step else None)


def _first_and_last(walk: Replay) -> tuple[dict[tuple[int, str], Materialization],
                                           dict[tuple[int, str], Materialization]]:
    """The first materialization of each preloaded (tensor, device), and the last one of
    each (tensor, device): what the graph inputs and constants, and the outputs, are bound to."""
    first = {(m.tensor, m.device): m for m in walk.materializations if m.preloaded}
    last = {(m.tensor, m.device): m for m in walk.materializations}
    return first, last


_set_attribute = object.__setattr__  # a model's slots, set as pydantic sets them


def _trusted(model: type[Model], fields: dict[str, Any]) -> Model:
    """A `model` holding `fields` without validating them: `fields` names every field, in the
    model's order (the JSON follows it). For the plan's buffers and steps only, whose fields the
    builder computes itself and planner.plan.validate re-checks: on the 20,000-op chain (73,000
    of them) validating them as dicts took about 0.5 s of the 1.2 s build (less the layout), and
    the dicts doubled the objects the garbage collector walks; pydantic's model_construct is
    slower still. (The four attributes are the ones pydantic sets when it validates.)"""
    instance = model.__new__(model)
    _set_attribute(instance, "__dict__", fields)
    _set_attribute(instance, "__pydantic_fields_set__", set(fields))
    _set_attribute(instance, "__pydantic_extra__", None)
    _set_attribute(instance, "__pydantic_private__", None)
    return instance


def _buffers(graph: Graph, walk: Replay, name: dict[Materialization, str],
             layouts: dict[str, Layout]) -> list[BufferSpec]:
    """One `BufferSpec` per materialization, in the order they were written."""
    tensors, last_steps = graph.tensors, walk.live_ends
    offsets = {device: layout.offsets for device, layout in layouts.items()}
    specs = []
    for m in walk.materializations:
        tensor = tensors[m.tensor]
        storage = name[m.owner]
        specs.append(_trusted(BufferSpec, {
            "id": name[m],
            "tensor": tensor.name,
            "device": m.device,
            "offset": offsets[m.device][storage],
            "size": tensor.nbytes,
            "dtype": tensor.dtype,
            "shape": list(tensor.shape),
            "first_step": m.first,
            "last_step": last_steps[m],
            "role": tensor.role.value,
            "zone": PERSISTENT if walk.holds_for_whole_step(m) else "transient",
            "preloaded": m.preloaded,
            "storage": storage,
            "storage_offset": 0,
            "shares": m.shares,
        }))
    return specs


def _steps(graph: Graph, walk: Replay, name: dict[Materialization, str]
           ) -> list[ComputeStep | CopyStep | FreeStep]:
    """The plan's steps, one per schedule event, naming the buffers the replay assigned."""
    steps: list[ComputeStep | CopyStep | FreeStep] = []
    ops = graph.ops
    slot: dict[Materialization | None, str | None] = {None: None}  # an omitted slot: None
    slot.update(name.items())  # else the buffer id of the slot's materialization
    for event, io in zip(walk.schedule.events, walk.events, strict=True):
        if isinstance(event, Compute):
            op = ops[event.op]
            steps.append(_trusted(ComputeStep, {
                "kind": "compute", "op_id": op.id, "op_name": op.name, "op_type": op.op_type,
                "device": event.device,
                "inputs": list(map(slot.__getitem__, io.reads)),
                "outputs": list(map(slot.__getitem__, io.writes)),
                "recompute": event.recompute,
            }))
        elif isinstance(event, Copy):
            src, dst = io.reads[0], io.writes[0]
            assert src is not None and dst is not None, "a copy reads and writes one buffer"
            steps.append(_trusted(CopyStep, {"kind": "copy", "src": name[src], "dst": name[dst]}))
        elif isinstance(event, Free):
            assert io.freed is not None, "a free names what it frees"
            steps.append(_trusted(FreeStep, {"kind": "free", "buffer": name[io.freed]}))
    return steps
