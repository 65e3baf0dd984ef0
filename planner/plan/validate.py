"""Independent replay of a plan: is it executable, within budget, and complete?

The validator trusts nothing the solvers computed. It shares no code with them beyond the graph
IR, the layout checker (itself independent of the layout solvers) and the live-bytes sum of the
plan's own declarations (planner.plan.live): it replays the plan's steps one by one, keeping
its own record of which buffers are live, and checks that

- every buffer holds a real tensor of the model with its exact size, dtype and shape, on a device
  the plan budgets for;
- every compute step reads buffers that hold the op's inputs, are live and are on the step's
  device, and writes fresh buffers holding the op's outputs; copies read live buffers; nothing is
  read after it was freed and nothing is freed twice;
- each buffer's declared live range covers every use, and the live bytes of every device at every
  step stay within its budget and its arena;
- no two buffers of a device overlap in both time and address (aliases share their owner's bytes),
  every buffer lies inside the arena and the arenas fit the budgets;
- every graph input and constant is preloaded, every graph output (the loss, every updated
  parameter and state) is produced and live at the end.

It returns the per-device memory curve and the time predicted from a profile.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from planner.ir.graph import Graph
from planner.layout import Buffer, Layout, check_layout
from planner.plan.live import live_curves
from schemas.plan import (
    PLAN_SCHEMA_VERSION,
    BufferSpec,
    ComputeStep,
    CopyStep,
    FreeStep,
    Plan,
)
from schemas.profile import Profile


@dataclass(frozen=True)
class ValidationReport:
    errors: list[str]
    live_bytes: dict[str, list[int]] = field(default_factory=dict)
    predicted_seconds: float | None = None

    @property
    def ok(self) -> bool:
        return not self.errors


def validate_plan(graph: Graph, plan: Plan, profile: Profile | None = None) -> ValidationReport:
    errors: list[str] = []
    if plan.schema_version != PLAN_SCHEMA_VERSION:
        errors.append(f"schema_version {plan.schema_version} is not {PLAN_SCHEMA_VERSION}")
    if plan.model_sha256 != graph.model_sha256:
        errors.append("plan was made for another model (sha256 differs)")
        return ValidationReport(errors)
    budgets = plan.request.budgets
    buffers = {}
    for b in plan.buffers:
        if b.id in buffers:
            errors.append(f"buffer id {b.id} is used twice")
        buffers[b.id] = b
        errors.extend(_check_buffer(graph, b, budgets))
    if errors:
        return ValidationReport(errors)
    errors.extend(_replay(graph, plan, buffers))
    live = _live_curves(plan, buffers)
    errors.extend(_check_memory(plan, buffers, live))
    predicted = _predicted_seconds(plan, buffers, profile) if profile is not None else None
    return ValidationReport(errors, live, predicted)


def _check_buffer(graph: Graph, b: BufferSpec, budgets: Mapping[str, int]) -> list[str]:
    if b.device not in budgets:
        return [f"buffer {b.id} is on {b.device}, which the plan has no budget for"]
    try:
        tensor = graph.tensor(b.tensor)
    except KeyError:
        return [f"buffer {b.id} holds '{b.tensor}', which is not a tensor of the model"]
    problems = []
    if (b.size, b.dtype, tuple(b.shape)) != (tensor.nbytes, tensor.dtype, tensor.shape):
        problems.append(f"buffer {b.id} does not match tensor {tensor.name}'s size/dtype/shape")
    if b.first_step > b.last_step:
        problems.append(f"buffer {b.id} ends before it starts")
    return problems


def _replay(graph: Graph, plan: Plan, buffers: dict[str, BufferSpec]) -> list[str]:
    errors: list[str] = []
    live: set[str] = set()
    created: dict[str, int] = {}
    freed: dict[str, int] = {}
    uses: dict[str, list[int]] = {}
    preloaded = {b.id for b in plan.buffers if b.preloaded}
    for b_id in preloaded:
        live.add(b_id)
        created[b_id] = 0
    for name, b_id in [*plan.graph_inputs.items(), *plan.constants.items()]:
        if b_id not in preloaded or buffers[b_id].tensor != name:
            errors.append(f"graph input/constant {name} is not preloaded into a buffer holding it")
    expected_inputs = {graph.tensors[t].name for t in graph.inputs}
    expected_constants = {t.name for t in graph.tensors if t.is_initializer}
    if set(plan.graph_inputs) != expected_inputs:
        errors.append("graph_inputs does not list exactly the model's graph inputs")
    if set(plan.constants) != expected_constants:
        errors.append("constants does not list exactly the model's initializers")

    def read(b_id: str, step: int, device: str | None, tensor: str | None) -> None:
        if b_id not in buffers:
            errors.append(f"step {step} reads unknown buffer {b_id}")
        elif b_id not in live:
            state = "after it was freed" if b_id in freed else "before it exists"
            errors.append(f"step {step} reads buffer {b_id} {state}")
        elif device is not None and buffers[b_id].device != device:
            errors.append(f"step {step} on {device} reads {b_id} on {buffers[b_id].device}")
        elif tensor is not None and buffers[b_id].tensor != tensor:
            errors.append(f"step {step} expects tensor {tensor} but {b_id} holds "
                          f"{buffers[b_id].tensor}")
        uses.setdefault(b_id, []).append(step)

    def write(b_id: str, step: int, device: str, tensor: str) -> None:
        b = buffers.get(b_id)
        if b is None:
            errors.append(f"step {step} writes unknown buffer {b_id}")
            return
        if b_id in created:
            errors.append(f"step {step} writes buffer {b_id} a second time")
        if b.device != device or b.tensor != tensor:
            errors.append(f"step {step} writes {tensor} on {device} into {b_id} "
                          f"({b.tensor} on {b.device})")
        created[b_id] = step
        live.add(b_id)
        if b.alias_of is not None:
            # In place: the old value's storage is taken over; it must not be read again.
            live.discard(b.alias_of)
            freed.setdefault(b.alias_of, step)

    for step, s in enumerate(plan.steps):
        if isinstance(s, ComputeStep):
            if not 0 <= s.op_id < len(graph.ops):
                errors.append(f"step {step} runs unknown op {s.op_id}")
                continue
            op = graph.ops[s.op_id]
            if s.device not in plan.request.budgets:
                errors.append(f"step {step} runs on {s.device}, which has no budget")
            if len(s.inputs) != len(op.inputs) or len(s.outputs) != len(op.outputs):
                errors.append(f"step {step} ({op.name}) has the wrong number of inputs/outputs")
                continue
            for t, bound in zip(op.inputs, s.inputs, strict=True):
                if t is not None and bound is not None:
                    read(bound, step, s.device, graph.tensors[t].name)
                elif (t is None) != (bound is None):
                    errors.append(f"step {step} ({op.name}) binds an omitted input or omits one")
            for t, bound in zip(op.outputs, s.outputs, strict=True):
                if t is not None and bound is not None:
                    write(bound, step, s.device, graph.tensors[t].name)
        elif isinstance(s, CopyStep):
            read(s.src, step, None, None)
            if s.src in buffers:
                src = buffers[s.src]
                dst = buffers.get(s.dst)
                write(s.dst, step, dst.device if dst else "?", src.tensor)
        elif isinstance(s, FreeStep):
            if s.buffer not in live:
                errors.append(f"step {step} frees {s.buffer}, which is not live")
            live.discard(s.buffer)
            freed[s.buffer] = step

    for name, b_id in plan.graph_outputs.items():
        if b_id not in live or buffers[b_id].tensor != name:
            errors.append(f"graph output {name} is not live in its buffer at the end")
    expected_outputs = {graph.tensors[t].name for t in graph.outputs}
    if set(plan.graph_outputs) != expected_outputs:
        errors.append("graph_outputs does not list exactly the model's graph outputs")
    for b_id, b in buffers.items():
        if b_id not in created:
            errors.append(f"buffer {b_id} is never written")
            continue
        first = created[b_id]
        last = max([first, *uses.get(b_id, [])])
        if b.first_step > first or b.last_step < last:
            errors.append(f"buffer {b_id} is used in steps {first}..{last} but declared live "
                          f"in {b.first_step}..{b.last_step}")
    return errors


def _live_curves(plan: Plan, buffers: dict[str, BufferSpec]) -> dict[str, list[int]]:
    n = len(plan.steps)
    curves = live_curves(buffers.values(), n)
    return {device: curves[device].tolist() if device in curves else [0] * n
            for device in plan.request.budgets}


def _check_memory(plan: Plan, buffers: dict[str, BufferSpec],
                  live: dict[str, list[int]]) -> list[str]:
    errors = []
    arenas = {d.device: d.arena_bytes for d in plan.devices}
    for device, budget in plan.request.budgets.items():
        arena = arenas.get(device)
        if arena is None:
            errors.append(f"no arena is declared for {device}")
            continue
        if arena > budget:
            errors.append(f"arena of {device} ({arena} B) exceeds its budget ({budget} B)")
        curve = live.get(device, [])
        worst = max(curve, default=0)
        if worst > min(budget, arena):
            step = curve.index(worst)
            errors.append(f"{device} holds {worst} B live at step {step}, more than its "
                          f"budget {budget} B / arena {arena} B")
        owners = [b for b in buffers.values() if b.device == device and b.alias_of is None]
        placed = [Buffer(b.id, b.first_step, b.last_step + 1, max(b.size, 1)) for b in owners]
        layout = Layout(
            offsets={b.id: b.offset for b in owners}, arena_size=arena, lower_bound=0,
            status="FEASIBLE", method="plan", solve_seconds=0.0,
        )
        errors.extend(f"{device}: {v}" for v in check_layout(placed, layout,
                                                            plan.request.alignment))
        for b in buffers.values():
            if b.device == device and b.alias_of is not None:
                owner = buffers.get(b.alias_of)
                if owner is None or owner.offset != b.offset or owner.device != device:
                    errors.append(f"alias {b.id} does not sit on its owner {b.alias_of}")
    return errors


def _predicted_seconds(plan: Plan, buffers: dict[str, BufferSpec],
                       profile: Profile) -> float | None:
    from planner.profile import copy_seconds

    costs = {op.op_id: op.costs for op in profile.ops}
    total = 0.0
    for s in plan.steps:
        if isinstance(s, ComputeStep):
            cost = costs.get(s.op_id, {}).get(s.device)
            if cost is None:
                return None
            total += cost.median_seconds
        elif isinstance(s, CopyStep):
            total += copy_seconds(profile, buffers[s.src].device, buffers[s.dst].device,
                                  buffers[s.src].size)
    return total
