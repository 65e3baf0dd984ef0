"""Memory in use per device over the steps (XEngine Fig. 4), stacked by layer.

Live bytes at step k are the sizes of the device's buffers whose inclusive live range holds k,
counting an in-place alias once (it shares its owner's bytes): the same curve the validator
checks against the budget (both from planner.plan.live). Long plans are downsampled to at most
`max_points` steps, keeping in each bucket the step with the most bytes live, so the peak is
never lost.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.plan.live import live_curves
from planner.report.index import PlanIndex
from planner.report.palette import LAYERS
from schemas.plan import ComputeStep, CopyStep


@dataclass(frozen=True)
class MemoryCurve:
    device: str
    budget_bytes: int
    arena_bytes: int
    lower_bound_bytes: int
    n_steps: int
    starts: list[int]  # first step of each point's span (a span ends where the next starts)
    steps: list[int]  # the step each point shows: the one with the most bytes live in its span
    layers: dict[str, list[int]]  # layer -> bytes live at each shown step, in stacking order
    total: list[int]
    peak_bytes: int
    peak_step: int
    recompute_steps: list[int]  # steps that recompute an op on this device
    copy_steps: list[int]  # steps that copy into or out of this device
    downsampled: bool


def memory_curves(index: PlanIndex, max_points: int = 2000) -> list[MemoryCurve]:
    n = max(index.n_steps, 1)
    arenas = {d.device: d for d in index.plan.devices}
    curves = []
    for device in index.devices:
        per_layer = live_curves(index.on(device), n, key=index.layer)
        layers = {name: per_layer[name] for name in LAYERS if name in per_layer}
        total = sum(layers.values(), np.zeros(n, dtype=np.int64))
        starts, shown = _representative_steps(total, max_points)
        plan_device = arenas.get(device)
        curves.append(MemoryCurve(
            device=device,
            budget_bytes=index.plan.request.budgets.get(device, 0),
            arena_bytes=plan_device.arena_bytes if plan_device else 0,
            lower_bound_bytes=plan_device.lower_bound_bytes if plan_device else 0,
            n_steps=index.n_steps,
            starts=starts.tolist(),
            steps=shown.tolist(),
            layers={name: values[shown].tolist() for name, values in layers.items()},
            total=total[shown].tolist(),
            peak_bytes=int(total.max()),
            peak_step=int(total.argmax()),
            recompute_steps=[k for k, s in enumerate(index.plan.steps)
                             if isinstance(s, ComputeStep) and s.recompute and s.device == device],
            copy_steps=[k for k, s in enumerate(index.plan.steps)
                        if isinstance(s, CopyStep) and device in _copy_devices(index, s)],
            downsampled=len(shown) < n,
        ))
    return curves


def _copy_devices(index: PlanIndex, s: CopyStep) -> set[str]:
    return {index.buffers[b].device for b in (s.src, s.dst) if b in index.buffers}


def _representative_steps(total: np.ndarray, max_points: int) -> tuple[np.ndarray, np.ndarray]:
    """(span starts, shown steps): every step, or buckets of consecutive steps, each shown by
    its step with the most bytes live."""
    n = len(total)
    if n <= max_points:
        return np.arange(n), np.arange(n)
    edges = np.unique(np.linspace(0, n, max_points + 1).astype(int))
    starts = edges[:-1]
    shown = np.array([a + int(total[a:b].argmax())
                      for a, b in zip(starts, edges[1:], strict=True)])
    return starts, shown
