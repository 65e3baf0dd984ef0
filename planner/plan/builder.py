"""Turn a schedule into a `schemas.Plan`: buffers with ids and lifetimes, steps, arena layouts.

Buffer lifetimes are inclusive step ranges: a buffer is live from the step that creates it (step
0 for preloaded graph inputs and constants) to the last step that reads it; persistent buffers
(state and constants) and graph outputs live to the last step. An in-place state update becomes
an alias of its state's buffer when nothing reads the old value after the update; otherwise it
is a buffer of its own (the runtime then copies it into the state's buffer between steps).

Each device's buffers are then laid out in one arena by planner.layout; the plan reports the
arena next to the live-bytes lower bound.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from planner.ir.graph import Graph
from planner.layout import Buffer, Layout, plan_layout
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

PERSISTENT = "persistent"


@dataclass
class _Materialization:
    id: str
    tensor: int
    device: str
    first: int
    reads: list[int] = field(default_factory=list)
    freed_at: int | None = None
    preloaded: bool = False
    alias_of: str | None = None


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
    solvers: list[SolverReport],
    predicted_seconds: float | None = None,
    layout_time_limit: float = 10.0,
) -> BuiltPlan:
    buffers, steps, resident = _replay(graph, schedule)
    n_steps = len(steps)
    updates = state_updates(graph)
    _alias_in_place_updates(graph, buffers, updates.in_place)
    persistent = _persistent_ids(graph, buffers, updates.persistent)

    layouts: dict[str, Layout] = {}
    devices = []
    for device, budget in request.budgets.items():
        mine = [b for b in buffers.values() if b.device == device and b.alias_of is None]
        layout = plan_layout(
            [
                Buffer(
                    id=b.id,
                    lower=0 if b.id in persistent else b.first,
                    upper=n_steps if b.id in persistent else _last_step(graph, b, n_steps) + 1,
                    size=max(graph.tensors[b.tensor].nbytes, 1),
                    zone=PERSISTENT if b.id in persistent else None,
                )
                for b in mine
            ],
            alignment=request.alignment,
            time_limit=layout_time_limit,
            workers=request.workers,
            seed=request.seed,
        )
        layouts[device] = layout
        solvers.append(SolverReport(
            phase="layout", device=device, method=layout.method, status=layout.status,
            objective=layout.arena_size, bound=layout.lower_bound, gap=layout.gap,
            seconds=layout.solve_seconds,
        ))
        devices.append(DevicePlan(
            device=device,
            budget_bytes=budget,
            arena_bytes=layout.arena_size,
            lower_bound_bytes=layout.live_bytes_bound,
            persistent_bytes=sum(graph.tensors[b.tensor].nbytes for b in mine
                                 if b.id in persistent),
        ))

    specs = []
    for b in buffers.values():
        tensor = graph.tensors[b.tensor]
        owner = b.alias_of or b.id
        specs.append(BufferSpec(
            id=b.id,
            tensor=tensor.name,
            device=b.device,
            offset=layouts[b.device].offsets[owner],
            size=tensor.nbytes,
            dtype=tensor.dtype,
            shape=list(tensor.shape),
            first_step=b.first,
            last_step=n_steps - 1 if b.id in persistent else _last_step(graph, b, n_steps),
            role=tensor.role.value,
            zone=PERSISTENT if b.id in persistent else "transient",
            preloaded=b.preloaded,
            alias_of=b.alias_of,
        ))

    plan = Plan(
        plan_id=plan_id,
        planner_version=planner_version,
        model_sha256=graph.model_sha256,
        request=request,
        devices=devices,
        buffers=specs,
        steps=steps,
        graph_inputs={graph.tensors[t].name: resident[(t, schedule.home[t])][0]
                      for t in graph.inputs},
        graph_outputs={graph.tensors[t].name: resident[(t, schedule.home[t])][-1]
                       for t in graph.outputs},
        constants={t.name: resident[(t.id, schedule.home[t.id])][0]
                   for t in graph.tensors if t.is_initializer},
        state_updates={graph.tensors[t].name: graph.tensors[graph.tensors[t].updated_by].name
                       for t in sorted(updates.persistent)},
        predicted_seconds=predicted_seconds,
        solvers=solvers,
    )
    return BuiltPlan(plan=plan, layouts=layouts)


def _replay(graph: Graph, schedule: Schedule):
    """Walk the events, creating a materialization per compute output / copy."""
    buffers: dict[str, _Materialization] = {}
    current: dict[tuple[int, str], _Materialization] = {}
    history: dict[tuple[int, str], list[str]] = {}
    counts: dict[tuple[int, str], int] = {}

    def create(tensor: int, device: str, step: int, preloaded: bool = False) -> str:
        key = (tensor, device)
        k = counts.get(key, 0)
        counts[key] = k + 1
        name = f"{graph.tensors[tensor].name}@{device}" + (f"#{k}" if k else "")
        m = _Materialization(name, tensor, device, step, preloaded=preloaded)
        buffers[name] = m
        current[key] = m
        history.setdefault(key, []).append(name)
        return name

    for tensor, device in sorted(schedule.home.items()):
        if graph.tensors[tensor].producer is None:
            create(tensor, device, 0, preloaded=True)
    steps = []
    for index, event in enumerate(schedule.events):
        if isinstance(event, Compute):
            op = graph.ops[event.op]
            inputs = []
            for t in op.inputs:
                if t is None:
                    inputs.append(None)
                    continue
                m = current[(t, event.device)]
                m.reads.append(index)
                inputs.append(m.id)
            outputs = [None if t is None else create(t, event.device, index) for t in op.outputs]
            steps.append(ComputeStep(
                op_id=op.id, op_name=op.name, op_type=op.op_type, device=event.device,
                inputs=inputs, outputs=outputs, recompute=event.recompute,
            ))
        elif isinstance(event, Copy):
            src = current[(event.tensor, event.src)]
            src.reads.append(index)
            dst = create(event.tensor, event.dst, index)
            steps.append(CopyStep(src=src.id, dst=dst))
        elif isinstance(event, Free):
            m = current.pop((event.tensor, event.device))
            m.freed_at = index
            steps.append(FreeStep(buffer=m.id))
    return buffers, steps, history


def _last_step(graph: Graph, b: _Materialization, n_steps: int) -> int:
    if b.freed_at is None and graph.tensors[b.tensor].is_graph_output:
        return n_steps - 1
    return max([b.first, *b.reads])


def _alias_in_place_updates(graph: Graph, buffers, in_place: dict[int, int]) -> None:
    """Let an updated state share its state's storage when no read of the old value follows."""
    preloaded = {(b.tensor, b.device): b for b in buffers.values() if b.preloaded}
    for new in buffers.values():
        old = preloaded.get((in_place.get(new.tensor), new.device))
        if old is not None and old.freed_at is None and all(r <= new.first for r in old.reads):
            new.alias_of = old.id


def _persistent_ids(graph: Graph, buffers, persistent_tensors) -> set[str]:
    """Preloaded state and constants: they sit in the persistent zone for the whole step."""
    return {
        b.id
        for b in buffers.values()
        if b.preloaded
        and (b.tensor in persistent_tensors or graph.tensors[b.tensor].is_initializer)
    }
