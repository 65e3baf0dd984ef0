"""The arena map of each device (OLLA's picture): every buffer as a rectangle, its live step range
by its byte range in the arena, coloured by layer.

Views and in-place writes are not drawn as rectangles of their own (they sit on their storage
owner's bytes, which the rectangle spans for the storage's whole life); the owner's caption names
them. A plan with more than `max_rects` buffers on a device draws the
largest ones and says how many small ones were left out.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.plan.live import storage_ranges
from planner.report.index import PlanIndex


@dataclass(frozen=True)
class ArenaRect:
    buffer: str
    tensor: str
    layer: str
    offset: int
    size: int
    first_step: int
    last_step: int  # inclusive
    zone: str
    aliases: list[str]  # buffers sharing this one's storage (views, in-place writes)


@dataclass(frozen=True)
class ArenaMap:
    device: str
    arena_bytes: int
    lower_bound_bytes: int
    budget_bytes: int
    persistent_bytes: int
    n_steps: int
    rects: list[ArenaRect]
    left_out: int  # buffers not drawn (too many)


def arena_maps(index: PlanIndex, max_rects: int = 20_000) -> list[ArenaMap]:
    aliases: dict[str, list[str]] = {}
    for b in index.plan.buffers:
        if not b.owns_storage:
            aliases.setdefault(b.storage, []).append(b.id)
    plans = {d.device: d for d in index.plan.devices}
    maps = []
    end = max(0, index.n_steps - 1)
    for device in index.devices:
        owners = storage_ranges(index.on(device))
        shown = sorted(owners, key=lambda o: -o[0].size)[:max_rects]
        shown.sort(key=lambda o: (o[0].offset, o[1]))
        rects = []
        for b, first, last in shown:
            first, last = min(first, end), min(last, end)
            rects.append(ArenaRect(b.id, b.tensor, index.layer(b), b.offset, b.size, first, last,
                                   b.zone, aliases.get(b.id, [])))
        plan_device = plans.get(device)
        maps.append(ArenaMap(
            device=device,
            arena_bytes=plan_device.arena_bytes if plan_device else 0,
            lower_bound_bytes=plan_device.lower_bound_bytes if plan_device else 0,
            budget_bytes=index.plan.request.budgets.get(device, 0),
            persistent_bytes=plan_device.persistent_bytes if plan_device else 0,
            n_steps=index.n_steps,
            rects=rects,
            left_out=len(owners) - len(shown),
        ))
    return maps
