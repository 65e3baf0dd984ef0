"""Kernel scratch a plan reserves per device beside its arena (`DevicePlan.workspace_bytes`).

A kernel may allocate memory of its own while it runs (an im2col column buffer for Conv and its
gradients, a select temporary for Where, ...). The profile measures it per op and device with
ONNX Runtime's profiler (planner.profile.op_runner: the arena's peak during the node minus what
was in use around it, with every output bound by the caller); a plan made without a profile
takes it from one whole-graph session instead (planner.profile.graph_workspace). The runtime
also lets ONNX Runtime allocate the outputs a plan does not keep (a compute step's `None`
output): they live only while their op runs, so they count with its scratch.

The runtime runs one op at a time on a device, and scratch is returned when the op ends, so a
device's workspace is the largest figure of any compute step placed on it. An op the measurement
does not cover counts 0 (a profile without the arena fields reports 0 too): the figure is what
was measured, not a guess.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from planner.ir.graph import Graph
from planner.profile.costs import measured_as
from schemas.plan import ComputeStep, Plan
from schemas.profile import OpProfile, Profile

# (op id, device of the step) -> the op's measured scratch bytes on that device
ScratchOf = Callable[[int, str], int]


def measured_scratch(measured: OpProfile | None, device: str) -> int:
    """An op's scratch on `device` in its profile entry (a `cpu:N` arena: the CPU's)."""
    costs = measured.costs if measured is not None else {}
    cost = costs.get(device) or costs.get(measured_as(device))
    return cost.workspace_bytes if cost is not None else 0


def unkept_bytes(graph: Graph, step: ComputeStep) -> int:
    """The outputs the plan lets ONNX Runtime allocate (present in the graph, unkept)."""
    op = graph.ops[step.op_id]
    return sum(graph.tensors[t].nbytes
               for t, b_id in zip(op.outputs, step.outputs, strict=True)
               if t is not None and b_id is None)


def step_workspace(graph: Graph, step: ComputeStep, measured: OpProfile | None) -> int:
    """Scratch of one compute step: its op's measured scratch on the step's device plus the
    outputs the plan lets ONNX Runtime allocate."""
    return measured_scratch(measured, step.device) + unkept_bytes(graph, step)


def device_workspace(graph: Graph, plan: Plan, scratch_of: ScratchOf) -> dict[str, int]:
    """Device -> the most scratch one of its compute steps takes (0 for a device without one),
    each step's op scratch given by `scratch_of`."""
    found = {d.device: 0 for d in plan.devices}
    for step in plan.steps:
        if isinstance(step, ComputeStep):
            found[step.device] = max(found[step.device], scratch_of(step.op_id, step.device)
                                     + unkept_bytes(graph, step))
    return found


def plan_workspace(graph: Graph, plan: Plan, profile: Profile) -> dict[str, int]:
    """Device -> the most scratch one of its compute steps takes, as `profile` measured it."""
    by_op = {o.op_id: o for o in profile.ops}
    return device_workspace(graph, plan,
                            lambda op_id, device: measured_scratch(by_op.get(op_id), device))


def set_workspace(plan: Plan, found: Mapping[str, int]) -> Plan:
    """`plan` with the `workspace_bytes` of every device in `found` set to its figure."""
    devices = [d.model_copy(update={"workspace_bytes": found[d.device]})
               if d.device in found else d for d in plan.devices]
    return plan.model_copy(update={"devices": devices})


def with_workspace(graph: Graph, plan: Plan, profile: Profile) -> Plan:
    """`plan` with every device's `workspace_bytes` set from `profile`."""
    return set_workspace(plan, plan_workspace(graph, plan, profile))
