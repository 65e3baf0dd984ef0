"""The report's summary numbers and its step list, from the plan (and the model when given).

- per device: budget, arena, live-bytes lower bound, peak live bytes, persistent zone, steps run,
  recomputations, copies in and out;
- predicted time next to keep-everything time (the remat phase's baseline, when it ran);
- which ops are recomputed and how often, copies per route with their bytes;
- every solver phase with its status, objective, bound and gap.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from planner.ir.graph import Graph
from planner.report.index import PlanIndex
from planner.report.memory import MemoryCurve
from schemas.plan import ComputeStep, CopyStep, FreeStep, SolverReport

DETAIL_CHARS = 200


@dataclass(frozen=True)
class DeviceSummary:
    device: str
    budget_bytes: int
    arena_bytes: int
    lower_bound_bytes: int
    persistent_bytes: int
    peak_live_bytes: int
    peak_step: int
    buffers: int
    compute_steps: int
    recompute_steps: int
    copies_in: int
    bytes_in: int
    copies_out: int
    bytes_out: int


@dataclass(frozen=True)
class RecomputedOp:
    op_id: int
    name: str
    op_type: str
    region: str | None
    device: str
    times: int
    output_bytes: int  # bytes one recomputation writes


@dataclass(frozen=True)
class CopyRoute:
    src: str
    dst: str
    copies: int
    bytes: int


@dataclass(frozen=True)
class PlanSummary:
    plan_id: str
    planner_version: str
    schema_version: int
    model_sha256: str
    model_name: str | None
    model_ops: int | None
    ops_by_region: dict[str, int]
    n_steps: int
    compute_steps: int
    recompute_steps: int
    copy_steps: int
    free_steps: int
    devices: list[DeviceSummary]
    predicted_seconds: float | None
    keep_everything_seconds: float | None
    recomputed_ops: list[RecomputedOp]
    copy_routes: list[CopyRoute]
    solvers: list[SolverReport]
    request: dict

    @property
    def copied_bytes(self) -> int:
        return sum(route.bytes for route in self.copy_routes)

    @property
    def slowdown(self) -> float | None:
        """Predicted time over keep-everything time, minus one (0.1 = 10% slower)."""
        if self.predicted_seconds is None or not self.keep_everything_seconds:
            return None
        return self.predicted_seconds / self.keep_everything_seconds - 1.0


def summarize_plan(index: PlanIndex, curves: list[MemoryCurve],
                   graph: Graph | None = None) -> PlanSummary:
    plan = index.plan
    steps = plan.steps
    buffers = index.buffers
    peaks = {c.device: (c.peak_bytes, c.peak_step) for c in curves}
    arenas = {d.device: d for d in plan.devices}
    routes: dict[tuple[str, str], list[int]] = {}
    for s in steps:
        if isinstance(s, CopyStep) and s.src in buffers and s.dst in buffers:
            route = routes.setdefault((buffers[s.src].device, buffers[s.dst].device), [0, 0])
            route[0] += 1
            route[1] += buffers[s.src].size
    devices = []
    for device in index.devices:
        d = arenas.get(device)
        on_device = [s for s in steps if isinstance(s, ComputeStep) and s.device == device]
        into = [v for (src, dst), v in routes.items() if dst == device and src != device]
        out = [v for (src, dst), v in routes.items() if src == device and dst != device]
        devices.append(DeviceSummary(
            device=device,
            budget_bytes=plan.request.budgets.get(device, 0),
            arena_bytes=d.arena_bytes if d else 0,
            lower_bound_bytes=d.lower_bound_bytes if d else 0,
            persistent_bytes=d.persistent_bytes if d else 0,
            peak_live_bytes=peaks.get(device, (0, 0))[0],
            peak_step=peaks.get(device, (0, 0))[1],
            buffers=sum(b.device == device for b in plan.buffers),
            compute_steps=sum(not s.recompute for s in on_device),
            recompute_steps=sum(s.recompute for s in on_device),
            copies_in=sum(v[0] for v in into), bytes_in=sum(v[1] for v in into),
            copies_out=sum(v[0] for v in out), bytes_out=sum(v[1] for v in out),
        ))
    remat = [r for r in plan.solvers if r.phase == "remat"]
    keep_everything = next((r.baseline for r in remat if r.baseline is not None), None)
    return PlanSummary(
        plan_id=plan.plan_id,
        planner_version=plan.planner_version,
        schema_version=plan.schema_version,
        model_sha256=plan.model_sha256,
        model_name=graph.name if graph is not None else None,
        model_ops=len(graph.ops) if graph is not None else None,
        ops_by_region=dict(Counter(op.region.value for op in graph.ops))
        if graph is not None else {},
        n_steps=len(steps),
        compute_steps=sum(isinstance(s, ComputeStep) and not s.recompute for s in steps),
        recompute_steps=sum(isinstance(s, ComputeStep) and s.recompute for s in steps),
        copy_steps=sum(isinstance(s, CopyStep) for s in steps),
        free_steps=sum(isinstance(s, FreeStep) for s in steps),
        devices=devices,
        predicted_seconds=plan.predicted_seconds,
        keep_everything_seconds=keep_everything,
        recomputed_ops=_recomputed_ops(index),
        copy_routes=[CopyRoute(src, dst, v[0], v[1]) for (src, dst), v in sorted(routes.items())],
        solvers=list(plan.solvers),
        request={
            "time_limit_s": plan.request.time_limit_s, "workers": plan.request.workers,
            "seed": plan.request.seed, "alignment": plan.request.alignment,
            "dims": dict(plan.request.dims),
            "profile": "given" if plan.request.profile is not None else "none",
        },
    )


def _recomputed_ops(index: PlanIndex) -> list[RecomputedOp]:
    counts: Counter[tuple[int, str]] = Counter()
    written: dict[tuple[int, str], int] = {}
    for s in index.plan.steps:
        if isinstance(s, ComputeStep) and s.recompute:
            key = (s.op_id, s.device)
            counts[key] += 1
            written[key] = sum(index.buffers[b].size for b in s.outputs
                               if b is not None and b in index.buffers)
    result = []
    for (op_id, device), times in counts.items():
        info = index.ops[op_id]
        result.append(RecomputedOp(op_id, info.name, info.op_type, info.region, device, times,
                                   written[(op_id, device)]))
    result.sort(key=lambda r: (index.first_compute.get(r.op_id, 0), r.device))
    return result


def step_rows(index: PlanIndex) -> list[list]:
    """One row per step: [step, kind, device, what, bytes, detail, region].

    kind is compute / recompute / copy / free; bytes are what the step writes (compute, copy) or
    releases (free).
    """
    buffers = index.buffers
    rows: list[list] = []
    for k, s in enumerate(index.plan.steps):
        if isinstance(s, ComputeStep):
            outs = [b for b in s.outputs if b is not None]
            ins = [b for b in s.inputs if b is not None]
            size = sum(buffers[b].size for b in outs if b in buffers)
            detail = f"{', '.join(ins)} -> {', '.join(outs)}"
            region = index.ops[s.op_id].region if s.op_id in index.ops else None
            rows.append([k, "recompute" if s.recompute else "compute", s.device,
                         f"{s.op_name} ({s.op_type})", size, _clip(detail), region or ""])
        elif isinstance(s, CopyStep):
            src, dst = buffers.get(s.src), buffers.get(s.dst)
            route = f"{src.device if src else '?'} -> {dst.device if dst else '?'}"
            rows.append([k, "copy", route, src.tensor if src else s.src, src.size if src else 0,
                         _clip(f"{s.src} -> {s.dst}"), ""])
        else:
            b = buffers.get(s.buffer)
            rows.append([k, "free", b.device if b else "?", b.tensor if b else s.buffer,
                         b.size if b else 0, _clip(s.buffer), ""])
    return rows


def _clip(text: str) -> str:
    return text if len(text) <= DETAIL_CHARS else text[:DETAIL_CHARS - 1] + "\u2026"
