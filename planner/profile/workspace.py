"""Kernel scratch a plan reserves per device beside its arena (`DevicePlan.workspace_bytes`).

A kernel may allocate memory of its own while it runs (an im2col column buffer for Conv and its
gradients, a select temporary for Where, ...). The profile measures it per op and device with
ONNX Runtime's profiler (planner.profile.op_runner: the arena's peak during the node minus what
was in use around it, with every output bound by the caller). The runtime also lets ONNX Runtime
allocate the outputs a plan does not keep (a compute step's `None` output): they live only while
their op runs, so they count with its scratch.

The runtime runs one op at a time on a device, and scratch is returned when the op ends, so a
device's workspace is the largest figure of any compute step placed on it. An op the profile does
not cover counts 0 (a profile without the arena fields reports 0 too): the figure is what was
measured, not a guess.
"""

from __future__ import annotations

from planner.ir.graph import Graph
from planner.profile.costs import measured_as
from schemas.plan import ComputeStep, Plan
from schemas.profile import OpProfile, Profile


def step_workspace(graph: Graph, step: ComputeStep, measured: OpProfile | None) -> int:
    """Scratch of one compute step: its op's measured scratch on the step's device plus the
    outputs the plan lets ONNX Runtime allocate (present in the graph, unkept by the step)."""
    op = graph.ops[step.op_id]
    unkept = sum(graph.tensors[t].nbytes
                 for t, b_id in zip(op.outputs, step.outputs, strict=True)
                 if t is not None and b_id is None)
    costs = measured.costs if measured is not None else {}
    cost = costs.get(step.device) or costs.get(measured_as(step.device))
    return (cost.workspace_bytes if cost is not None else 0) + unkept


def plan_workspace(graph: Graph, plan: Plan, profile: Profile) -> dict[str, int]:
    """Device -> the most scratch one of its compute steps takes (0 for a device without one)."""
    by_op = {o.op_id: o for o in profile.ops}
    found = {d.device: 0 for d in plan.devices}
    for step in plan.steps:
        if isinstance(step, ComputeStep):
            found[step.device] = max(found[step.device],
                                     step_workspace(graph, step, by_op.get(step.op_id)))
    return found


def with_workspace(graph: Graph, plan: Plan, profile: Profile) -> Plan:
    """`plan` with every device's `workspace_bytes` set from `profile`."""
    found = plan_workspace(graph, plan, profile)
    devices = [d.model_copy(update={"workspace_bytes": found[d.device]}) for d in plan.devices]
    return plan.model_copy(update={"devices": devices})
