"""Lookups over one plan that every part of the report needs, computed once.

Which step made each buffer (a compute step, a recomputation or a copy), which op's output each
buffer holds (following copies back to the op that computed the value), and each buffer's layer
(palette.LAYERS). Only the plan is needed; a graph, when given, adds the op regions.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from planner.ir.graph import Graph
from planner.report.palette import COPIED, RECOMPUTED, layer_of_role
from schemas.errors import ArenaplanError
from schemas.plan import BufferSpec, ComputeStep, CopyStep, Plan


class ReportInputError(ArenaplanError):
    """The plan and the model given for its report do not belong together."""


@dataclass(frozen=True)
class OpInfo:
    op_id: int
    name: str
    op_type: str
    region: str | None  # forward / backward / optimizer, known only with the model


@dataclass
class PlanIndex:
    plan: Plan
    buffers: dict[str, BufferSpec]
    n_steps: int
    ops: dict[int, OpInfo]
    devices: list[str]
    made_by_step: dict[str, int] = field(default_factory=dict)  # buffer -> step that wrote it
    op_of_buffer: dict[str, int] = field(default_factory=dict)  # buffer -> op whose output it is
    recomputed_buffers: set[str] = field(default_factory=set)
    copied_buffers: set[str] = field(default_factory=set)
    first_compute: dict[int, int] = field(default_factory=dict)  # op -> first step running it

    def layer(self, b: BufferSpec) -> str:
        if b.id in self.recomputed_buffers:
            return RECOMPUTED
        if b.id in self.copied_buffers:
            return COPIED
        return layer_of_role(b.role)

    def owners(self, device: str) -> list[BufferSpec]:
        """Buffers of `device` that own their bytes (views and in-place writes share them)."""
        return [b for b in self.on(device) if b.owns_storage]

    def on(self, device: str) -> list[BufferSpec]:
        """Every buffer of `device`."""
        return [b for b in self.plan.buffers if b.device == device]


def index_plan(plan: Plan, graph: Graph | None = None) -> PlanIndex:
    if graph is not None and graph.model_sha256 != plan.model_sha256:
        raise ReportInputError(
            f"the model given (sha256 {graph.model_sha256[:12]}...) is not the one this plan was "
            f"made for (sha256 {plan.model_sha256[:12]}...); pass the plan's own model or none"
        )
    devices = list(dict.fromkeys([d.device for d in plan.devices] + list(plan.request.budgets)))
    index = PlanIndex(
        plan=plan,
        buffers={b.id: b for b in plan.buffers},
        n_steps=len(plan.steps),
        ops={},
        devices=devices,
    )
    copy_sources: dict[str, str] = {}
    for step, s in enumerate(plan.steps):
        if isinstance(s, ComputeStep):
            if s.op_id not in index.ops:
                region = None
                if graph is not None and s.op_id < len(graph.ops):
                    region = graph.ops[s.op_id].region.value
                index.ops[s.op_id] = OpInfo(s.op_id, s.op_name, s.op_type, region)
                index.first_compute[s.op_id] = step
            for b in s.outputs:
                if b is not None:
                    index.made_by_step[b] = step
                    index.op_of_buffer[b] = s.op_id
                    if s.recompute:
                        index.recomputed_buffers.add(b)
        elif isinstance(s, CopyStep):
            index.made_by_step[s.dst] = step
            index.copied_buffers.add(s.dst)
            copy_sources[s.dst] = s.src
    for dst in copy_sources:
        src, seen = copy_sources[dst], {dst}
        while src in copy_sources and src not in seen:  # a copy of a copy
            seen.add(src)
            src = copy_sources[src]
        if src in index.op_of_buffer:
            index.op_of_buffer[dst] = index.op_of_buffer[src]
    return index


def live_range(b: BufferSpec, n_steps: int) -> tuple[int, int]:
    """The buffer's inclusive step range, clipped to the plan."""
    last = max(0, n_steps - 1)
    return min(b.first_step, last), min(b.last_step, last)
