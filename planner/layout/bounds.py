"""The live-bytes lower bound on the arena size.

At any step every live buffer needs its own bytes, so the arena is at least the largest sum of
(padded) sizes live at one step. Two refinements keep it a valid bound in this model: the
persistent zones are reserved for the whole step (they count as always live), and a pre-placed
buffer forces the arena to reach its end. A layout whose arena equals this bound is optimal.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from planner.layout.instance import LayoutInstance, build_instance
from planner.layout.types import DEFAULT_ALIGNMENT, Buffer


def max_live_units(lower: np.ndarray, upper: np.ndarray, size: np.ndarray) -> int:
    """Largest sum of ``size`` over intervals ``[lower, upper)`` live at one time (sweep)."""
    if len(size) == 0:
        return 0
    times = np.concatenate((lower, upper))
    deltas = np.concatenate((size, -size))
    order = np.lexsort((deltas, times))  # at equal times, ends (negative) before starts
    return int(max(0, np.cumsum(deltas[order]).max()))


def live_bound_units(instance: LayoutInstance) -> int:
    """The lower bound in units (see module docstring)."""
    outside = ~instance.in_zone
    bound = instance.zone_top + max_live_units(
        instance.lower[outside], instance.upper[outside], instance.size[outside]
    )
    obstacles = instance.obstacle_idx
    if len(obstacles):
        bound = max(bound, int((instance.fixed_off[obstacles] + instance.size[obstacles]).max()))
    return bound


def lower_bound(buffers: Sequence[Buffer], alignment: int = DEFAULT_ALIGNMENT) -> int:
    """Bytes: max over time of the live bytes, sizes rounded up to their alignment.

    Zone buffers count as live for the whole step; pre-placed buffers also force the arena up to
    their end. Raises InvalidInputError for invalid buffers.
    """
    instance = build_instance(buffers, alignment)
    return live_bound_units(instance) * instance.unit
