"""Reductions that shrink a layout instance without losing any optimal solution.

Stacking always-live buffers: a free buffer live during the whole time span of the free buffers
conflicts with every one of them, so in any layout each other buffer lies wholly below or wholly
above it. Moving it to the bottom (right above the zones) and shifting the buffers that were
below it up by its size keeps the layout valid with the same arena. Repeating this for every
such buffer stacks them all at the bottom: they become part of the floor. The shift must keep
alignments, so this applies only when there are no pre-placed buffers in the way and every size
involved is a multiple of every free buffer's alignment.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from planner.layout.instance import LayoutInstance


def always_live(instance: LayoutInstance, members: np.ndarray) -> np.ndarray:
    """Indices among ``members`` (free buffers) whose lifetime covers all of ``members``'."""
    if len(members) == 0:
        return members
    start = instance.lower[members].min()
    end = instance.upper[members].max()
    return members[(instance.lower[members] <= start) & (instance.upper[members] >= end)]


def stack_always_live(instance: LayoutInstance) -> LayoutInstance:
    """The same instance with always-live free buffers fixed at the bottom, above the zones.

    Returns ``instance`` itself when the reduction does not apply (see module docstring).
    """
    free = instance.free_idx
    if len(free) == 0 or len(instance.obstacle_idx):
        return instance
    stacked = always_live(instance, free)
    if len(stacked) == 0:
        return instance
    max_step = int(instance.step[free].max())
    if instance.zone_top % max_step or np.any(instance.size[stacked] % max_step):
        return instance
    # largest first, then input order: deterministic
    stacked = stacked[np.lexsort((stacked, -instance.size[stacked]))]
    fixed = instance.fixed.copy()
    fixed_off = instance.fixed_off.copy()
    in_zone = instance.in_zone.copy()
    top = instance.zone_top
    for i in stacked.tolist():
        fixed[i] = True
        in_zone[i] = True
        fixed_off[i] = top
        top += int(instance.size[i])
    return replace(instance, fixed=fixed, fixed_off=fixed_off, in_zone=in_zone, zone_top=top)


def stackable(instance: LayoutInstance, members: np.ndarray, obstacles: np.ndarray) -> list[int]:
    """Members live during the whole span of ``members``, in stacking order (largest first),
    when stacking them at the bottom of this component is safe (no obstacles, alignments kept);
    otherwise an empty list. Used per independent time component."""
    if len(members) < 2 or len(obstacles):
        return []
    spanning = always_live(instance, members)
    if len(spanning) == 0:
        return []
    max_step = int(instance.step[members].max())
    if instance.zone_top % max_step or np.any(instance.size[spanning] % max_step):
        return []
    return spanning[np.lexsort((spanning, -instance.size[spanning]))].tolist()


def push_down(
    instance: LayoutInstance, offsets: dict[int, int], stacked: list[int]
) -> dict[int, int]:
    """A layout with ``stacked`` moved to the bottom (from the zone top, in order) and every
    other buffer raised by the sizes of the stacked buffers that were above it: the exchange
    argument of the module docstring applied to a given layout; the arena does not grow."""
    if not stacked:
        return dict(offsets)
    out: dict[int, int] = {}
    top = instance.zone_top
    for i in stacked:
        out[i] = top
        top += int(instance.size[i])
    stacked_offsets = np.asarray([offsets[i] for i in stacked], dtype=np.int64)
    stacked_sizes = instance.size[np.asarray(stacked)]
    for i, off in offsets.items():
        if i not in out:
            out[i] = off + int(stacked_sizes[stacked_offsets > off].sum())
    return out
