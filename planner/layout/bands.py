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
part it does not decide is split again. CP-SAT on the whole glued component of tight-450-s1
or -s5 finds nothing within 20 s with any of its searches; the split decides each of them
within about a second and a half (measured, 1 worker).

A band is found by a small CP-SAT model: a 0/1 choice per buffer, the chosen sizes summing to
the same ``c`` over every step (``c`` a multiple of the largest alignment, so the buffers above
the band keep theirs), some but not all chosen. A split whose parts are not both laid out is
excluded and another band is tried, a few times.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import numpy as np
from ortools.sat.python import cp_model

from planner.layout.exact import ExactOptions, decide_component
from planner.layout.instance import LayoutInstance
from planner.layout.intervals import time_components
from planner.layout.tiling import reduce_tiling

# CP-SAT's turn on each part before it is split; the band model's time; bands tried per part
_PART_SECONDS = 0.3
_BAND_SECONDS = 1.0
_BANDS_PER_PART = 3


def step_sections(instance: LayoutInstance, members: np.ndarray) -> list[list[int]]:
    """The buffers live at each step of ``members`` (between two consecutive lifetime ends)."""
    lower, upper = instance.lower[members], instance.upper[members]
    times = np.unique(np.concatenate((lower, upper)))
    first = np.searchsorted(times, lower)
    last = np.searchsorted(times, upper)
    sections: list[list[int]] = [[] for _ in range(len(times) - 1)]
    for i, a, b in zip(members.tolist(), first.tolist(), last.tolist(), strict=True):
        for k in range(a, b):
            sections[k].append(i)
    return sections


def _band_model(instance: LayoutInstance, members: np.ndarray, excluded: list[set[int]],
                guided: bool) -> tuple[cp_model.CpModel, dict[int, cp_model.IntVar],
                                       cp_model.IntVar]:
    model = cp_model.CpModel()
    chosen = {i: model.new_bool_var(f"x{i}") for i in members.tolist()}
    step = int(instance.step[members].max())
    total = int(instance.size[members].sum())
    height = model.new_int_var(1, max(1, total // step), "height")
    for section in step_sections(instance, members):
        model.add(sum(int(instance.size[i]) * chosen[i] for i in section) == step * height)
    model.add(sum(chosen.values()) >= 1)
    model.add(sum(chosen.values()) <= len(members) - 1)
    for band in excluded:
        model.add_bool_or([chosen[i] if i not in band else chosen[i].Not() for i in chosen])
    if guided:
        order = members[np.lexsort((-instance.size[members], instance.lower[members]))]
        model.add_decision_strategy([chosen[i] for i in order.tolist()], cp_model.CHOOSE_FIRST,
                                    cp_model.SELECT_MIN_VALUE)
    return model, chosen, height


def find_band(instance: LayoutInstance, members: np.ndarray, excluded: list[set[int]],
              seconds: float) -> tuple[list[int], int] | None:
    """A band of ``members`` other than those ``excluded``: (its buffers, its height ``c``).

    Half the time a fixed search (buffers by start, largest first, each left out of the band
    unless it must be in: the band found is low in time order), then CP-SAT's own: on the
    glued tight instances of the layout bench the first finds a band within 0.25 s on all but
    one, which the second finds within 0.9 s (measured, each alone)."""
    step = int(instance.step[members].max())
    for guided in (True, False):
        model, chosen, height = _band_model(instance, members, excluded, guided)
        solver = cp_model.CpSolver()
        solver.parameters.num_workers = 1
        solver.parameters.max_time_in_seconds = max(0.01, seconds / 2)
        if guided:
            solver.parameters.search_branching = cp_model.FIXED_SEARCH
        code = solver.solve(model)
        if code == cp_model.INFEASIBLE:
            return None
        if code in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return [i for i in chosen if solver.value(chosen[i])], step * int(solver.value(height))
    return None


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
