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
- storage sharing (schema version 2): every buffer's storage is a buffer owning itself on the
  same device, and the buffer sits inside it at the declared offset; a view is written by a view
  op reading a buffer of its storage; an in-place write is made by an elementwise op reading a
  buffer of its storage with its shape, and nothing else in that storage is read after it, holds
  a graph output, a constant or a data input;
- each buffer's declared live range covers every use, and the live bytes of every device at every
  step stay within its budget and its arena;
- no two storages of a device overlap in both time and address (a storage lives from the first
  step of any of its buffers to the last of any), every storage lies inside the arena and the
  arenas fit the budgets;
- every graph input and constant is preloaded, every graph output (the loss, every updated
  parameter and state) is produced and live at the end.

It returns the per-device memory curve and the time predicted from a profile.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field

from planner.ir.graph import Graph
from planner.layout import Buffer, Layout, check_layout
from planner.plan.live import range_curves, storage_ranges
from schemas.graph_rewrite import VIEW_OP_TYPES
from schemas.plan import (
    IN_PLACE_OP_TYPES,
    PLAN_SCHEMA_VERSION,
    SINGLE_INPUT_IN_PLACE_OP_TYPES,
    BufferSpec,
    ComputeStep,
    CopyStep,
    FreeStep,
    Plan,
)
from schemas.profile import OpCost, Profile


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
    if plan.optimized_graph != graph.optimized:
        made_for = plan.optimized_graph.level if plan.optimized_graph else "disable"
        graph_is = graph.optimized.level if graph.optimized else "disable"
        errors.append(f"plan was made for the model's graph at optimization '{made_for}', not "
                      f"this one ('{graph_is}', or another digest); load it with "
                      "planner.ir.graph.load_plan_graph")
        return ValidationReport(errors)
    budgets = plan.request.budgets
    buffers = {}
    for b in plan.buffers:
        if b.id in buffers:
            errors.append(f"buffer id {b.id} is used twice")
        buffers[b.id] = b
        errors.extend(_check_buffer(graph, b, budgets))
    errors.extend(_check_storage(buffers))
    if errors:
        return ValidationReport(errors)
    errors.extend(_replay(graph, plan, buffers))
    storages = storage_ranges(buffers.values())
    live = _live_curves(plan, storages)
    errors.extend(_check_memory(plan, storages, live))
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


def _check_storage(buffers: dict[str, BufferSpec]) -> list[str]:
    """Each buffer sits inside a storage owned by a buffer of its device (see the module doc)."""
    problems = []
    for b in buffers.values():
        owner = buffers.get(b.storage)
        if owner is None or not owner.owns_storage:
            problems.append(f"buffer {b.id} names storage {b.storage}, which no buffer owns")
        elif owner.device != b.device:
            problems.append(f"buffer {b.id} is on {b.device} but its storage {owner.id} is on "
                            f"{owner.device}")
        elif (b.offset != owner.offset + b.storage_offset
              or b.storage_offset + b.size > max(owner.size, 1)):
            problems.append(f"buffer {b.id} does not sit inside its storage {owner.id}")
        elif b.owns_storage != (b.shares is None):
            problems.append(f"buffer {b.id} must say how it shares storage {owner.id} "
                            "(view or in_place) exactly when it does not own it")
    return problems


def _replay(graph: Graph, plan: Plan, buffers: dict[str, BufferSpec]) -> list[str]:
    errors: list[str] = []
    live: set[str] = set()
    created: dict[str, int] = {}
    freed: dict[str, int] = {}
    uses: defaultdict[str, list[int]] = defaultdict(list)  # steps, in increasing order
    overwrites: list[tuple[int, str]] = []  # (step, buffer written over its storage)
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
        uses[b_id].append(step)

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
        if b.shares == "in_place":
            overwrites.append((step, b_id))

    # The common case, a step that breaks no rule, is checked inline; read() and write() say
    # what is wrong otherwise (a 20,000-op chain's plan has about 50,000 steps).
    names = [t.name for t in graph.tensors]
    ops, budgets = graph.ops, plan.request.budgets
    for step, s in enumerate(plan.steps):
        if isinstance(s, FreeStep):
            b_id = s.buffer
            if b_id not in live:
                errors.append(f"step {step} frees {b_id}, which is not live")
            live.discard(b_id)
            freed[b_id] = step
        elif isinstance(s, ComputeStep):
            op_id, device, inputs, outputs = s.op_id, s.device, s.inputs, s.outputs
            if not 0 <= op_id < len(ops):
                errors.append(f"step {step} runs unknown op {op_id}")
                continue
            op = ops[op_id]
            if device not in budgets:
                errors.append(f"step {step} runs on {device}, which has no budget")
            if len(inputs) != len(op.inputs) or len(outputs) != len(op.outputs):
                errors.append(f"step {step} ({op.name}) has the wrong number of inputs/outputs")
                continue
            for t, bound in zip(op.inputs, inputs, strict=True):
                if t is not None and bound is not None:
                    b = buffers.get(bound)
                    if (b is not None and bound in live and b.device == device
                            and b.tensor == names[t]):
                        uses[bound].append(step)
                    else:
                        read(bound, step, device, names[t])
                elif (t is None) != (bound is None):
                    errors.append(f"step {step} ({op.name}) binds an omitted input or omits one")
            for t, bound in zip(op.outputs, outputs, strict=True):
                if t is not None and bound is not None:
                    b = buffers.get(bound)
                    if (b is not None and bound not in created and b.device == device
                            and b.tensor == names[t]):
                        created[bound] = step
                        live.add(bound)
                        if b.shares == "in_place":
                            overwrites.append((step, bound))
                    else:
                        write(bound, step, device, names[t])
                    if b is not None and b.shares is not None:
                        errors.extend(_check_sharing_write(graph, s, step, bound, buffers))
        elif isinstance(s, CopyStep):
            read(s.src, step, None, None)
            if s.src in buffers:
                src = buffers[s.src]
                dst = buffers.get(s.dst)
                write(s.dst, step, dst.device if dst else "?", src.tensor)

    errors.extend(_check_overwrites(plan, buffers, overwrites, created, uses))
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
        used = uses.get(b_id)  # steps in increasing order
        last = max(first, used[-1]) if used else first
        if b.first_step > first or b.last_step < last:
            errors.append(f"buffer {b_id} is used in steps {first}..{last} but declared live "
                          f"in {b.first_step}..{b.last_step}")
    return errors


def _check_sharing_write(graph: Graph, s: ComputeStep, step: int, b_id: str,
                         buffers: dict[str, BufferSpec]) -> list[str]:
    """A view or in-place buffer is written by an op that may share and reads its storage."""
    b = buffers.get(b_id)
    if b is None or b.shares is None:
        return []
    read = [buffers[i] for i in s.inputs if i is not None and i in buffers]
    if b.shares == "view":
        source = buffers.get(s.inputs[0]) if s.inputs and s.inputs[0] is not None else None
        if s.op_type not in VIEW_OP_TYPES or source is None or source.storage != b.storage:
            return [f"step {step} ({s.op_name}) writes view {b_id}, but a {s.op_type} reading "
                    f"{source.id if source else 'nothing'} cannot be a view of {b.storage}"]
        return []
    slot = SINGLE_INPUT_IN_PLACE_OP_TYPES.get(s.op_type)
    if slot is not None:  # over its one input (a scatter's data, Gemm's C), no other input's
        target = buffers.get(s.inputs[slot] or "") if slot < len(s.inputs) else None
        others = [buffers[i] for k, i in enumerate(s.inputs)
                  if k != slot and i is not None and i in buffers]
        read = [target] if target is not None and all(
            r.storage != b.storage for r in others) else []
    if s.op_type not in IN_PLACE_OP_TYPES or not any(
            r.storage == b.storage and r.shape == b.shape and r.dtype == b.dtype for r in read):
        return [f"step {step} ({s.op_name}, {s.op_type}) cannot write {b_id} in place: it must "
                f"be an in-place op reading a buffer of storage {b.storage} with its shape"]
    return []


def _check_overwrites(plan: Plan, buffers: dict[str, BufferSpec],
                      overwrites: list[tuple[int, str]], created: dict[str, int],
                      uses: dict[str, list[int]]) -> list[str]:
    """Nothing written before an in-place write into the same storage is read after it, or must
    survive it (a graph output, a constant, a data input).

    Each storage's members are sorted by the step that wrote them, with the running latest use
    and whether one must survive; a write at step s looks only at the prefix written before s,
    in O(log k) when it is clean (a chain of k in-place writes is not quadratic)."""
    must_survive = set(plan.graph_outputs.values()) | set(plan.constants.values())
    must_survive |= {b_id for name, b_id in plan.graph_inputs.items()
                     if name not in plan.state_updates}
    written = {storage: _WrittenBefore(members, created, uses, must_survive)
               for storage, members in _members(buffers, {b for _, b in overwrites}).items()}
    errors = []
    for step, b_id in overwrites:
        before = written[buffers[b_id].storage]
        for other in before.conflicts(step):
            late = [u for u in uses.get(other.id, []) if u > step]
            if late:
                errors.append(f"step {step} writes {b_id} over storage {other.storage} while "
                              f"{other.id} is still read at step {late[0]}")
            else:
                errors.append(f"step {step} writes {b_id} over {other.id}, which must keep its "
                              "value (a graph output, a constant or a data input)")
    return errors


def _members(buffers: dict[str, BufferSpec], written: set[str]) -> dict[str, list[BufferSpec]]:
    """The buffers of each storage that one of `written` sits in."""
    storages = {buffers[b].storage for b in written}
    members: dict[str, list[BufferSpec]] = {s: [] for s in storages}
    if not members:
        return members
    for b in buffers.values():
        if b.storage in members:
            members[b.storage].append(b)
    return members


class _WrittenBefore:
    """One storage's members in the order they were written (members never written left out;
    preloaded ones before step 0, so that a write at step 0 cannot go over them unseen), with
    prefix maxima of their last use and prefix counts of those that must survive."""

    def __init__(self, members: list[BufferSpec], created: dict[str, int],
                 uses: dict[str, list[int]], must_survive: set[str]) -> None:
        def written_at(b: BufferSpec) -> int:
            return -1 if b.preloaded else created[b.id]

        self.members = sorted((b for b in members if b.id in created), key=written_at)
        self.steps = [written_at(b) for b in self.members]
        self.last_use: list[int] = []
        self.surviving: list[int] = []
        latest, count = -1, 0
        for b in self.members:
            latest = max(latest, *uses.get(b.id, [-1]))
            count += b.id in must_survive
            self.last_use.append(latest)
            self.surviving.append(count)
        self.must_survive = must_survive
        self.uses = uses

    def conflicts(self, step: int) -> list[BufferSpec]:
        """Members written before `step` that are read after it or must survive it."""
        k = bisect_left(self.steps, step)
        if k == 0 or (self.last_use[k - 1] <= step and not self.surviving[k - 1]):
            return []
        return [b for b in self.members[:k]
                if b.id in self.must_survive or any(u > step for u in self.uses.get(b.id, []))]


def _live_curves(plan: Plan, storages: list[tuple[BufferSpec, int, int]]
                 ) -> dict[str, list[int]]:
    n = len(plan.steps)
    curves = range_curves(storages, n)
    return {device: curves[device].tolist() if device in curves else [0] * n
            for device in plan.request.budgets}


def _check_memory(plan: Plan, storages: list[tuple[BufferSpec, int, int]],
                  live: dict[str, list[int]]) -> list[str]:
    errors = []
    arenas = {d.device: d.arena_bytes for d in plan.devices}
    by_device: dict[str, list[tuple[BufferSpec, int, int]]] = {}
    for storage in storages:
        by_device.setdefault(storage[0].device, []).append(storage)
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
        placed, offsets = [], {}
        for b, first, last in by_device.get(device, []):
            placed.append(Buffer(b.id, first, last + 1, max(b.size, 1)))
            offsets[b.id] = b.offset
        layout = Layout(offsets=offsets, arena_size=arena, lower_bound=0, status="FEASIBLE",
                        method="plan", solve_seconds=0.0)
        errors.extend(f"{device}: {v}" for v in check_layout(placed, layout,
                                                            plan.request.alignment))
    return errors


def _predicted_seconds(plan: Plan, buffers: dict[str, BufferSpec],
                       profile: Profile) -> float | None:
    from planner.profile import copy_seconds

    costs = {op.op_id: op.costs for op in profile.ops}
    unmeasured: dict[str, OpCost] = {}
    total = 0.0
    for s in plan.steps:  # summed in step order
        if isinstance(s, ComputeStep):
            cost = costs.get(s.op_id, unmeasured).get(s.device)
            if cost is None:
                return None
            # A run whose output shares an input's storage takes the in-place time where the
            # profile has one (planner.profile.costs.CostTable.run_seconds).
            written = next((buffers.get(b) for b in s.outputs if b is not None), None)
            shared = written is not None and written.shares is not None
            total += (cost.in_place_seconds if shared and cost.in_place_seconds is not None
                      else cost.median_seconds)
        elif isinstance(s, CopyStep):
            src, dst = buffers.get(s.src), buffers.get(s.dst)
            if src is None or dst is None:
                return None  # a copy of an unknown buffer (reported by the replay)
            total += copy_seconds(profile, src.device, dst.device, src.size)
    return total
