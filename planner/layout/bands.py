"""Layouts of a full component found by splitting it into bands: a search, never a proof.

A band is a set of the component's buffers whose live bytes are the same, ``c``, at every step
of the component. If the band has a layout in ``[floor, floor + c)`` and the other buffers one
in ``[floor + c, capacity)``, the two stacked are a layout of the whole (nothing of the band
reaches above ``floor + c``, nothing else below it). Not every layout is of this form, so a
split that fails proves nothing: CP-SAT on the whole component does that (planner.layout.exact).

Why it pays: an instance cut out of a rectangle (the tight synthetic instances of the layout
bench, every step full) is, where it is one component, two such bands stacked (its first cut
runs along the addresses), and each band falls apart into smaller components at its own cuts
in time. Each part is glued (planner.layout.tiling) and given to CP-SAT for a short while; a
part it does not decide is split again. On the whole glued component of tight-450-s5 none of
CP-SAT's searches found a layout (the decision portfolio's five, 5 s each; five other orders,
20 s each), nor the portfolio's five on tight-450-s1 (5 s each); split, each is laid out within
1.5 s (measured, 1 worker). Gluing can join two buffers of one lifetime that lie in different
bands, and then the glued component has no band (four of the ten 450-buffer seeds at the top
level): CP-SAT on the whole is what lays those out.

A band is found by a small CP-SAT model (`find_band`): a 0/1 choice per buffer, the chosen
bytes the same ``c`` at every step (``c`` a multiple of the largest alignment, so the buffers
above the band keep theirs), some but not all chosen. A split whose parts are not both laid out
is excluded and another band is tried, a few times.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from planner.layout.exact import ExactOptions, decide_component
from planner.layout.instance import LayoutInstance
from planner.layout.intervals import time_components
from planner.layout.tiling import reduce_tiling

if TYPE_CHECKING:  # OR-Tools' cp_model imports pandas (~0.6 s): imported where a model is built
    pass

# CP-SAT's turn on each part before it is split; the band model's time; bands tried per part
_PART_SECONDS = 0.3
_BAND_SECONDS = 1.0
_BANDS_PER_PART = 3


def find_band(instance: LayoutInstance, members: np.ndarray, excluded: list[set[int]],
              seconds: float) -> tuple[list[int], int] | None:
    """A band of the time component ``members`` other than those ``excluded``: (its buffers,
    its height ``c``), or None (none exists, or none found within ``seconds``).

    The live bytes of the band are ``c`` at the first step and, at every later lifetime end,
    what of the band ends there has the size of what of it starts there: the same bytes at
    every step, each constraint over the few buffers of one time. Written as one sum per step
    instead (dozens of buffers each), CP-SAT took up to 4 s to find a band of a glued tight
    450-buffer instance; this way at most 0.07 s on each of the ten seeds that has one, and at
    most 0.3 s to prove that the others have none (measured)."""
    from ortools.sat.python import cp_model

    model = cp_model.CpModel()
    chosen = {i: model.new_bool_var(f"x{i}") for i in members.tolist()}
    step = int(instance.step[members].max())
    total = int(instance.size[members].sum())
    height = model.new_int_var(1, max(1, total // step), "height")
    lower, upper = instance.lower[members], instance.upper[members]
    first = members[lower == lower.min()]
    model.add(sum(int(instance.size[i]) * chosen[i] for i in first.tolist()) == step * height)
    for t in np.unique(lower[lower > lower.min()]).tolist():
        ending, starting = members[upper == t], members[lower == t]
        model.add(sum(int(instance.size[i]) * chosen[i] for i in ending.tolist())
                  == sum(int(instance.size[i]) * chosen[i] for i in starting.tolist()))
    for t in np.setdiff1d(upper[upper < upper.max()], lower).tolist():
        model.add(sum(int(instance.size[i]) * chosen[i] for i in members[upper == t].tolist())
                  == 0)
    model.add(sum(chosen.values()) >= 1)
    model.add(sum(chosen.values()) <= len(members) - 1)
    for band in excluded:
        model.add_bool_or([chosen[i] if i not in band else chosen[i].Not() for i in chosen])
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.max_time_in_seconds = max(0.01, seconds)
    if solver.solve(model) not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    return [i for i in chosen if solver.value(chosen[i])], step * int(solver.value(height))


@dataclass(frozen=True)
class BandLayout:
    """Offsets (units) of the buffers laid out; ``splits``: the bands split off on the way
    (0: CP-SAT decided every time component on its own)."""

    offsets: dict[int, int]
    splits: int


def _part(instance: LayoutInstance, members: np.ndarray, capacity: int,
          deadline: float) -> BandLayout | None:
    """A layout of one time component within ``[instance.zone_top, capacity)``, or None."""
    tiling = reduce_tiling(instance, members, capacity)
    glued, blocks = (tiling.instance, tiling.members) if tiling else (instance, members)

    def expanded(offsets: dict[int, int], splits: int) -> BandLayout:
        return BandLayout(tiling.expand(offsets) if tiling else offsets, splits)

    left = deadline - time.perf_counter()
    result = decide_component(glued, blocks, upper=capacity,
                              options=ExactOptions(time_limit=min(_PART_SECONDS, left)),
                              boundaries=tiling.boundaries if tiling else ())
    if result.arena is not None:
        return expanded(result.offsets, 0)
    if result.status == "INFEASIBLE":
        return None
    excluded: list[set[int]] = []
    for _ in range(_BANDS_PER_PART):
        left = deadline - time.perf_counter()
        band = find_band(glued, blocks, excluded, min(_BAND_SECONDS, left)) if left > 0 else None
        if band is None:
            return None
        chosen, height = band
        top = glued.zone_top + height
        below = band_layout(glued, np.asarray(chosen), top, deadline)
        above = None
        if below is not None:
            rest = blocks[~np.isin(blocks, chosen)]
            above = band_layout(replace(glued, zone_top=top), rest, capacity, deadline)
        if below is not None and above is not None:
            return expanded(below.offsets | above.offsets, below.splits + above.splits + 1)
        excluded.append(set(chosen))
    return None


def band_layout(instance: LayoutInstance, members: np.ndarray, capacity: int,
                deadline: float) -> BandLayout | None:
    """A layout of the free buffers ``members`` within ``[instance.zone_top, capacity)``, each
    time component glued, decided by CP-SAT or split into bands; None when none was found by
    ``deadline`` (which proves nothing)."""
    offsets: dict[int, int] = {}
    splits = 0
    for component in time_components(instance.lower, instance.upper, members):
        if time.perf_counter() > deadline:
            return None
        part = _part(instance, component, capacity, deadline)
        if part is None:
            return None
        offsets |= part.offsets
        splits += part.splits
    return BandLayout(offsets, splits)
