"""The arena map of each device (OLLA's picture): every buffer as a rectangle, its live step range
by its byte range in the arena, coloured by layer.

In-place aliases are not drawn as rectangles of their own (they sit on their owner's bytes); the
owner's caption names them. A plan with more than `max_rects` buffers on a device draws the
largest ones and says how many small ones were left out.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.report.index import PlanIndex, live_range


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
    aliases: list[str]  # buffers updating this one in place


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
        if b.alias_of is not None:
            aliases.setdefault(b.alias_of, []).append(b.id)
    plans = {d.device: d for d in index.plan.devices}
    maps = []
    for device in index.devices:
        owners = index.owners(device)
        shown = sorted(owners, key=lambda b: -b.size)[:max_rects]
        shown.sort(key=lambda b: (b.offset, b.first_step))
        rects = []
        for b in shown:
            first, last = live_range(b, index.n_steps)
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
