"""Turn a schedule into a `schemas.Plan`: buffers with ids and lifetimes, steps, arena layouts.

A buffer is one materialization of planner.memory.replay, with its live range and storage from
there: a view or an in-place write names the buffer owning the bytes it sits in (schema version
2); an updated state whose chain did not run in place is a buffer of its own (the runtime then
copies it into the state's buffer between steps).

Each device's storages (owners, over the union of their buffers' live ranges) are then laid out
in one arena by planner.layout; the plan reports the arena next to the live-bytes lower bound.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from planner.ir.graph import Graph
from planner.layout import Buffer, Layout, plan_layout
from planner.memory.replay import Materialization, Replay, replay
from planner.memory.schedule import Compute, Copy, Free, Schedule
from planner.memory.sharing import state_updates
from schemas.plan import (
    DevicePlan,
    Plan,
    PlanRequest,
    SolverReport,
)

PERSISTENT: Final = "persistent"


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
) -> BuiltPlan:
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

    specs = [_buffer_spec(graph, walk, m, name, layouts) for m in walk.materializations]
    history = walk.final()
    updates = state_updates(graph)

    plan = Plan.model_validate({  # buffers and steps as dicts: see _buffer_spec
        "plan_id": plan_id,
        "planner_version": planner_version,
        "model_sha256": graph.model_sha256,
        "optimized_graph": graph.optimized,
        "request": request,
        "devices": devices,
        "buffers": specs,
        "steps": _steps(graph, walk, name),
        "graph_inputs": {graph.tensors[t].name: name[history[(t, schedule.home[t])][0]]
                         for t in graph.inputs},
        "graph_outputs": {graph.tensors[t].name: name[history[(t, schedule.home[t])][-1]]
                          for t in graph.outputs},
        "constants": {t.name: name[history[(t.id, schedule.home[t.id])][0]]
                      for t in graph.tensors if t.is_initializer},
        "state_updates": {graph.tensors[t].name: graph.tensors[new].name
                          for t in sorted(updates.persistent)
                          if (new := graph.tensors[t].updated_by) is not None},  # all of them
        "predicted_seconds": predicted_seconds,
        "solvers": reports,
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


# The plan's buffers and steps are handed to `Plan` as plain dicts, validated in one call: with
# tens of thousands of them, one model constructed per buffer and step took a fifth of building
# a 20,000-op chain's plan (pydantic's model_construct is slower still). Steps name their kind
# for the discriminated union; the JSON is the same.

def _buffer_spec(graph: Graph, walk: Replay, m: Materialization,
                 name: dict[Materialization, str], layouts: dict[str, Layout]) -> dict[str, Any]:
    """One `BufferSpec`'s fields."""
    tensor = graph.tensors[m.tensor]
    whole_step = walk.holds_for_whole_step(m)
    storage = name[m.owner]
    return {
        "id": name[m],
        "tensor": tensor.name,
        "device": m.device,
        "offset": layouts[m.device].offsets[storage],
        "size": tensor.nbytes,
        "dtype": tensor.dtype,
        "shape": list(tensor.shape),
        "first_step": m.first,
        "last_step": walk.live_range(m)[1],
        "role": tensor.role.value,
        "zone": PERSISTENT if whole_step else "transient",
        "preloaded": m.preloaded,
        "storage": storage,
        "shares": m.shares,
    }


def _steps(graph: Graph, walk: Replay, name: dict[Materialization, str]) -> list[dict[str, Any]]:
    """The plan's steps' fields, one per schedule event, naming the buffers the replay
    assigned."""
    steps: list[dict[str, Any]] = []
    ops = graph.ops
    for event, io in zip(walk.schedule.events, walk.events, strict=True):
        if isinstance(event, Compute):
            op = ops[event.op]
            steps.append({
                "kind": "compute", "op_id": op.id, "op_name": op.name, "op_type": op.op_type,
                "device": event.device,
                "inputs": [None if m is None else name[m] for m in io.reads],
                "outputs": [None if m is None else name[m] for m in io.writes],
                "recompute": event.recompute,
            })
        elif isinstance(event, Copy):
            src, dst = io.reads[0], io.writes[0]
            assert src is not None and dst is not None, "a copy reads and writes one buffer"
            steps.append({"kind": "copy", "src": name[src], "dst": name[dst]})
        elif isinstance(event, Free):
            assert io.freed is not None, "a free names what it frees"
            steps.append({"kind": "free", "buffer": name[io.freed]})
    return steps
