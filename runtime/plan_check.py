"""The runtime's own check of a plan before it touches memory: it imports nothing of the planner.

In order, each failure with its own error type:
1. the schema version is the one this runtime runs (UnsupportedPlanVersionError);
2. the plan was made for these model bytes (ModelMismatchError);
3. every arena fits the budget the plan declares for its device (ArenaBudgetError);
4. structure (PlanCheckError): every buffer lies inside its device's arena, aligned to its
   elements, and holds its tensor's dtype and shape; every buffer sits in a storage (schema
   version 2) owned by a buffer of the same device, at the owner's offset plus its
   storage_offset and inside the owner's bytes; every compute step runs a real op of the model
   with its inputs in live buffers on the step's device and writes fresh buffers; a view is
   written by a view op reading a buffer at the same address (the kernel writes nothing) and an
   in-place buffer by an elementwise op over an input at the same address, and that write ends
   every other buffer of its storage (nothing reads them afterwards); copies read live buffers
   and write buffers that own their bytes; nothing is freed twice; declared live ranges cover
   every use; no two storages of a device overlap in both address and time (a storage lives
   from the first step of any of its buffers to the last step of any of them); graph inputs and
   constants are preloaded, graph outputs live at the end, state updates match their states;
5. an optional validator injected by the caller (the CLI passes the planner's validator), whose
   problems are reported the same way.

Whether a device exists is checked when the executor allocates its arena (DeviceUnavailableError).
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable, Iterable

import numpy as np

from runtime.errors import ArenaBudgetError, ModelMismatchError, PlanCheckError
from runtime.model import RuntimeModel, ValueType
from runtime.plan_io import check_schema_version
from schemas.graph_rewrite import VIEW_OP_TYPES
from schemas.plan import (
    IN_PLACE_OP_TYPES,
    SINGLE_INPUT_IN_PLACE_OP_TYPES,
    BufferSpec,
    ComputeStep,
    CopyStep,
    FreeStep,
    Plan,
)

# A validator returns the problems it finds (empty when the plan is good).
PlanValidator = Callable[[Plan], Iterable[str]]
MAX_LISTED = 5


def check_plan(model: RuntimeModel, plan: Plan, validator: PlanValidator | None = None) -> None:
    """Raise the typed error for the first kind of problem the plan has; return if it runs."""
    check_schema_version(plan.schema_version)
    if plan.model_sha256 != model.sha256:
        raise ModelMismatchError(
            f"the plan was made for another model (plan sha256 {plan.model_sha256[:12]}..., "
            f"this model {model.sha256[:12]}...); plan this model, or run the model the plan "
            "was made for"
        )
    check_budgets(plan)
    problems = structural_problems(model, plan)
    if problems:
        raise PlanCheckError(_summary("the plan fails the runtime's structural check", problems),
                             problems)
    if validator is not None:
        problems = list(validator(plan))
        if problems:
            raise PlanCheckError(_summary("the plan fails validation", problems), problems)


def check_budgets(plan: Plan) -> None:
    budgets = plan.request.budgets
    for device in plan.devices:
        budget = budgets.get(device.device, device.budget_bytes)
        limit = min(budget, device.budget_bytes)
        if device.arena_bytes > limit:
            raise ArenaBudgetError(
                f"{device.device}: the plan asks for an arena of {device.arena_bytes} B but its "
                f"budget is {limit} B; the plan is inconsistent: re-plan within the budget"
            )


def _summary(title: str, problems: list[str]) -> str:
    more = f" (and {len(problems) - MAX_LISTED} more)" if len(problems) > MAX_LISTED else ""
    return f"{title}: {'; '.join(problems[:MAX_LISTED])}{more}"


def structural_problems(model: RuntimeModel, plan: Plan) -> list[str]:
    problems: list[str] = []
    arenas: dict[str, int] = {}
    for device in plan.devices:
        if device.device in arenas:
            problems.append(f"device {device.device} is declared twice")
        arenas[device.device] = device.arena_bytes
    buffers: dict[str, BufferSpec] = {}
    for b in plan.buffers:
        if b.id in buffers:
            problems.append(f"buffer id {b.id} is used twice")
        buffers[b.id] = b
        problems.extend(_buffer_problems(model, b, arenas))
    if problems:
        return problems
    problems.extend(_storage_problems(buffers))
    problems.extend(_interface_problems(model, plan, buffers))
    if problems:
        return problems
    problems.extend(_replay_problems(model, plan, buffers, arenas))
    if problems:
        return problems
    for device_name in arenas:
        problems.extend(_overlap_problems(device_name, buffers))
    return problems


def _buffer_problems(model: RuntimeModel, b: BufferSpec, arenas: dict[str, int]) -> list[str]:
    if b.device not in arenas:
        return [f"buffer {b.id} is on {b.device}, which has no arena in the plan"]
    try:
        dtype = np.dtype(b.dtype)
    except TypeError:
        return [f"buffer {b.id} has dtype {b.dtype!r}, which this runtime cannot hold"]
    problems = []
    if any(d < 0 for d in b.shape) or int(np.prod(b.shape, dtype=np.int64)) * dtype.itemsize \
            != b.size:
        problems.append(f"buffer {b.id}: size {b.size} B does not match {b.dtype}{b.shape}")
    if b.offset % dtype.itemsize:
        problems.append(f"buffer {b.id} at offset {b.offset} is not aligned to its {b.dtype} "
                        "elements")
    if b.offset + b.size > arenas[b.device]:
        problems.append(f"buffer {b.id} [{b.offset}, {b.offset + b.size}) lies outside the "
                        f"{arenas[b.device]} B arena of {b.device}")
    if b.first_step > b.last_step:
        problems.append(f"buffer {b.id} ends (step {b.last_step}) before it starts "
                        f"({b.first_step})")
    known = model.types.get(b.tensor)
    if known is not None and not _matches(known, dtype, b.shape):
        problems.append(f"buffer {b.id} holds {b.dtype}{b.shape} but tensor {b.tensor} is "
                        f"{known.dtype}{list(known.shape)}")
    return problems


def _matches(known: ValueType, dtype: np.dtype, shape: list[int]) -> bool:
    try:
        if known.dtype != dtype:
            return False
    except (KeyError, TypeError, ValueError):
        return True  # a type numpy cannot name: nothing to compare
    if len(known.shape) != len(shape):
        return False
    return all(k is None or k == s for k, s in zip(known.shape, shape, strict=True))


def _storage_problems(buffers: dict[str, BufferSpec]) -> list[str]:
    """Every buffer sits inside a storage: an owner of its own bytes on the same device."""
    problems = []
    for b in buffers.values():
        owner = buffers.get(b.storage)
        if owner is None:
            problems.append(f"buffer {b.id} names storage {b.storage}, which is no buffer of "
                            "the plan")
        elif b.owns_storage:
            if b.shares is not None or b.storage_offset:
                problems.append(f"buffer {b.id} owns its storage but says it shares one "
                                f"(shares {b.shares!r}, storage_offset {b.storage_offset})")
        elif b.shares is None:
            problems.append(f"buffer {b.id} sits in {owner.id}'s storage but does not say how "
                            "it shares it (shares: 'view' or 'in_place')")
        elif not owner.owns_storage:
            problems.append(f"buffer {b.id} names storage {owner.id}, which does not own its "
                            f"bytes (they are {owner.storage}'s)")
        elif owner.device != b.device:
            problems.append(f"buffer {b.id} is on {b.device} but its storage {owner.id} is on "
                            f"{owner.device}")
        elif b.offset != owner.offset + b.storage_offset:
            problems.append(f"buffer {b.id} is at offset {b.offset}, not at its storage "
                            f"{owner.id}'s offset {owner.offset} + storage_offset "
                            f"{b.storage_offset}")
        elif b.storage_offset + b.size > owner.size:
            problems.append(f"buffer {b.id} [{b.storage_offset}, {b.storage_offset + b.size}) "
                            f"does not fit in its storage {owner.id} of {owner.size} B")
        elif b.preloaded:
            problems.append(f"buffer {b.id} is preloaded but does not own its bytes")
    return problems


def _interface_problems(model: RuntimeModel, plan: Plan, buffers: dict[str, BufferSpec]
                        ) -> list[str]:
    problems = []
    for label, mapping, expected in (
        ("graph_inputs", plan.graph_inputs, set(model.inputs)),
        ("constants", plan.constants, set(model.initializers)),
        ("graph_outputs", plan.graph_outputs, set(model.outputs)),
    ):
        if set(mapping) != expected:
            missing = sorted(expected - set(mapping))[:3]
            extra = sorted(set(mapping) - expected)[:3]
            problems.append(f"{label} does not list the model's exactly (missing {missing}, "
                            f"unknown {extra})")
        for name, b_id in mapping.items():
            b = buffers.get(b_id)
            if b is None:
                problems.append(f"{label}[{name}] names unknown buffer {b_id}")
            elif b.tensor != name:
                problems.append(f"{label}[{name}] is buffer {b_id}, which holds {b.tensor}")
            elif label != "graph_outputs" and not b.preloaded:
                problems.append(f"{label}[{name}]: buffer {b_id} is not preloaded")
    for name, array in model.initializers.items():
        b = buffers.get(plan.constants.get(name, ""))
        if b is not None and (np.dtype(b.dtype) != array.dtype or tuple(b.shape) != array.shape):
            problems.append(f"constant {name} is {array.dtype}{list(array.shape)} but its buffer "
                            f"holds {b.dtype}{b.shape}")
    for state, output in plan.state_updates.items():
        if state not in plan.graph_inputs or output not in plan.graph_outputs:
            problems.append(f"state update {state} -> {output} does not map a graph input to a "
                            "graph output")
            continue
        old, new = buffers[plan.graph_inputs[state]], buffers[plan.graph_outputs[output]]
        if (old.dtype, old.shape) != (new.dtype, new.shape):
            problems.append(f"state {state} ({old.dtype}{old.shape}) cannot take the value of "
                            f"{output} ({new.dtype}{new.shape})")
    return problems


def _replay_problems(model: RuntimeModel, plan: Plan, buffers: dict[str, BufferSpec],
                     arenas: dict[str, int]) -> list[str]:
    problems: list[str] = []
    live: set[str] = set()
    created: dict[str, int] = {}
    last_use: dict[str, int] = {}
    ended: set[str] = set()
    overwritten: set[str] = set()  # ended by an in-place write over their bytes
    freed: set[str] = set()
    members: dict[str, list[str]] = {}  # storage -> its buffers
    for b in buffers.values():
        members.setdefault(b.storage, []).append(b.id)
        if b.preloaded:
            live.add(b.id)
            created[b.id] = 0

    def read(b_id: str | None, step: int, device: str | None, tensor: str | None) -> None:
        b = buffers.get(b_id or "")
        if b is None:
            problems.append(f"step {step} reads unknown buffer {b_id}")
            return
        if b_id not in live:
            why = "after its life ended" if b_id in ended else "before it is written"
            problems.append(f"step {step} reads buffer {b_id} {why}")
        if device is not None and b.device != device:
            problems.append(f"step {step} runs on {device} but reads {b_id} on {b.device}")
        if tensor is not None and b.tensor != tensor:
            problems.append(f"step {step} needs tensor {tensor} but buffer {b_id} holds {b.tensor}")
        last_use[b.id] = step

    def write(b_id: str, step: int, device: str | None, tensor: str,
              writer: ComputeStep | None) -> None:
        b = buffers.get(b_id)
        if b is None:
            problems.append(f"step {step} writes unknown buffer {b_id}")
            return
        if b_id in created:
            problems.append(f"step {step} writes buffer {b_id}, which already holds a value")
        if (device is not None and b.device != device) or b.tensor != tensor:
            problems.append(f"step {step} writes {tensor} into {b_id} ({b.tensor} on {b.device})")
        if b.shares is not None:
            why = _shared_write_problem(b, writer, buffers)
            if why is not None:
                problems.append(f"step {step} writes {b_id}, {b.shares} of storage {b.storage}, "
                                f"{why}")
        created[b_id] = step
        last_use[b_id] = step
        live.add(b_id)
        if b.shares == "in_place":  # the storage's other values are gone from here on
            for other in members[b.storage]:
                if other != b_id and other in live:
                    live.discard(other)
                    ended.add(other)
                    overwritten.add(other)

    for step, s in enumerate(plan.steps):
        if isinstance(s, ComputeStep):
            if s.device not in arenas:
                problems.append(f"step {step} runs on {s.device}, which has no arena")
                continue
            if not 0 <= s.op_id < len(model.nodes):
                problems.append(f"step {step} runs op {s.op_id}; the model has "
                                f"{len(model.nodes)} ops")
                continue
            node = model.nodes[s.op_id]
            if node.op_type != s.op_type:
                problems.append(f"step {step}: op {s.op_id} is {node.op_type}, not {s.op_type}")
            if len(s.inputs) != len(node.input) or len(s.outputs) != len(node.output):
                problems.append(f"step {step} ({s.op_name}) binds {len(s.inputs)} inputs / "
                                f"{len(s.outputs)} outputs; the op has {len(node.input)} / "
                                f"{len(node.output)}")
                continue
            for name, b_id in zip(node.input, s.inputs, strict=True):
                if (not name) != (b_id is None):
                    problems.append(f"step {step} ({s.op_name}) binds an omitted input or "
                                    "omits a given one")
                elif b_id is not None:
                    read(b_id, step, s.device, name)
            for name, b_id in zip(node.output, s.outputs, strict=True):
                if b_id is not None:
                    if not name:
                        problems.append(f"step {step} ({s.op_name}) binds an omitted output")
                    else:
                        write(b_id, step, s.device, name, s)
        elif isinstance(s, CopyStep):
            read(s.src, step, None, None)
            src, dst = buffers.get(s.src), buffers.get(s.dst)
            if src is not None and dst is not None:
                if (src.dtype, src.shape) != (dst.dtype, dst.shape):
                    problems.append(f"step {step} copies {s.src} into {s.dst} of another "
                                    "dtype/shape")
                write(s.dst, step, None, src.tensor, None)
        elif isinstance(s, FreeStep):
            # a value written over in place may still get its free step: its life ended there
            if s.buffer in freed or (s.buffer not in live and s.buffer not in overwritten):
                problems.append(f"step {step} frees {s.buffer}, which is not live")
            freed.add(s.buffer)
            live.discard(s.buffer)
            ended.add(s.buffer)
        if len(problems) > 50:
            return problems

    for name, b_id in plan.graph_outputs.items():
        if b_id not in live:
            problems.append(f"graph output {name} is not live in buffer {b_id} at the end")
    for b_id, b in buffers.items():
        if b_id not in created:
            problems.append(f"buffer {b_id} is never written")
            continue
        used = (created[b_id], last_use.get(b_id, created[b_id]))
        if b.first_step > used[0] or b.last_step < used[1]:
            problems.append(f"buffer {b_id} is used in steps {used[0]}..{used[1]} but declared "
                            f"live in {b.first_step}..{b.last_step}")
    return problems


def _shared_write_problem(b: BufferSpec, writer: ComputeStep | None,
                          buffers: dict[str, BufferSpec]) -> str | None:
    """Why `writer` may not write `b` into bytes it shares (None when it may). A view is written
    by a view op whose data input (input 0) is at the same address, so the kernel writes
    nothing; an in-place value by an op that may write over an input of the same address and
    size, each element (row) read before it is written; a scatter (Gemm) only over its data input
    (its addend C), with no other input in that storage."""
    if writer is None:
        return "but a copy writes only buffers that own their bytes"
    view = b.shares == "view"
    if writer.op_type not in (VIEW_OP_TYPES if view else IN_PLACE_OP_TYPES):
        kind = "a view op" if view else "an op that may write over its input"
        return f"but {writer.op_name} ({writer.op_type}) is not {kind}"
    slot = 0 if view else SINGLE_INPUT_IN_PLACE_OP_TYPES.get(writer.op_type)
    if not view and slot is not None and any(
            (src := buffers.get(i or "")) is not None and src.storage == b.storage
            for k, i in enumerate(writer.inputs) if k != slot):
        return f"but {writer.op_name} ({writer.op_type}) reads other inputs from the same storage"
    for src_id in writer.inputs if slot is None else writer.inputs[slot:slot + 1]:
        src = buffers.get(src_id or "")
        if src is not None and src.storage == b.storage and src.offset == b.offset and (
                view or src.size == b.size):
            return None
    where = "an input of the same size" if slot is None else f"its input {slot}"
    return f"but {writer.op_name} ({writer.op_type}) does not read {where} at its address"


def _overlap_problems(device: str, buffers: dict[str, BufferSpec]) -> list[str]:
    """Sweep over time keeping the live storages sorted by address: a new storage may only touch
    its two address neighbours, so checking them finds every time-and-address overlap.

    Only owners are placed; a storage lives from the first step of any of its buffers to the last
    step of any of them (its other buffers sit inside the owner's bytes: _storage_problems)."""
    spans: dict[str, tuple[int, int]] = {}
    for b in buffers.values():
        if b.device == device:
            first, last = spans.get(b.storage, (b.first_step, b.last_step))
            spans[b.storage] = (min(first, b.first_step), max(last, b.last_step))
    owners = sorted(
        (buffers[s] for s in spans if buffers[s].size),
        key=lambda b: (spans[b.id][0], b.offset),
    )
    problems: list[str] = []
    active: list[tuple[int, int, str]] = []  # (offset, end, id), sorted by offset
    expiry: list[tuple[int, int, str]] = []  # (last step, offset, id)
    for b in owners:
        first, last = spans[b.id]
        while expiry and expiry[0][0] < first:
            _, offset, b_id = heapq.heappop(expiry)
            index = bisect.bisect_left(active, (offset, -1, ""))
            while active[index][2] != b_id:
                index += 1
            active.pop(index)
        item = (b.offset, b.offset + b.size, b.id)
        index = bisect.bisect_left(active, item)
        clash = None
        if index > 0 and active[index - 1][1] > b.offset:
            clash = active[index - 1][2]
        elif index < len(active) and active[index][0] < b.offset + b.size:
            clash = active[index][2]
        if clash is not None:
            problems.append(f"{device}: the storages of {clash} and {b.id} overlap in address "
                            "while both are live")
            if len(problems) >= 20:
                break
            continue
        active.insert(index, item)
        heapq.heappush(expiry, (last, b.offset, b.id))
    return problems
