"""Hot-window decomposition: lay out a time component around its tightest window first.

On real training steps the live bytes come close to the peak only in a window of steps around
the end of the forward pass; elsewhere there is room to spare. Fixing the offsets of every
buffer live in that window cuts the component at the window: a free buffer wholly before it
and one wholly after it never share a step, so the two sides become independent problems
around fixed obstacles, and loose ones. The search over the whole component instead meets the
peak only after hundreds of choices made where they did not matter, and cannot tell which of
them to revisit (the canonical search failed on five real traces that this solves in 0.1 s).

1. The window: the steps whose slack (capacity minus live bytes) is at most a share of the free
   height (capacity minus the zones), from the first to the last such step; its buffers with
   their lifetimes clipped to it. This is a relaxation: any layout of the component, read
   inside the window, is a layout of the window.
2. The window's layout under the capacity: the canonical search (planner.layout.canonical),
   else CP-SAT, whose "infeasible" proves that the whole component does not fit either.
3. The window's buffers fixed at those offsets over their whole lifetimes, the others placed by
   the heuristics around them; each independent group that they leave over the capacity goes to
   CP-SAT's decision (with the fixed buffers as obstacles).
A window's layout may leave the sides no room, so a few shares are tried, narrow ones first.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import numpy as np

from planner.layout.canonical import canonical_portfolio
from planner.layout.exact import ExactOptions, decide_component
from planner.layout.heuristics import run_heuristics
from planner.layout.instance import LayoutInstance, select
from planner.layout.intervals import live_profile, time_components

# slack shares of the free height that define the windows tried, in order (measured on the real
# traces of bench/layout: 0.02 closes all five that the whole-component search missed, 0.05
# four of them; the narrowest window is the likeliest proof)
WINDOW_SHARES = (0.02, 0.05, 0.1, 0.003)
# a window holding more than this share of the component is the whole problem again: skipped
_MAX_WINDOW_SHARE = 0.8
# the canonical search's moves per direction for a window: a base plus some per buffer
_BASE_NODES = 5_000
_NODES_PER_BUFFER = 40
# the share of a window attempt's time that CP-SAT gets for the window when the canonical
# search misses it (the rest is kept for the sides)
_WINDOW_CPSAT_SHARE = 0.3


@dataclass(frozen=True)
class WindowOutcome:
    """"FIT" (``offsets`` holds every member's offset, units), "INFEASIBLE" (a window proved
    that the component does not fit) or "UNKNOWN"; ``windows``: windows attempted."""

    status: str
    offsets: dict[int, int]
    windows: int


def hot_window(
    instance: LayoutInstance, members: np.ndarray, capacity: int, share: float
) -> tuple[int, int] | None:
    """The steps ``[start, end)`` from the first to the last section of ``members`` whose slack
    under ``capacity`` is at most ``share`` of the free height, or None if there is none."""
    times, load = live_profile(instance.lower, instance.upper, instance.size, members)
    slack = capacity - instance.zone_top - load
    hot = np.flatnonzero(slack <= share * (capacity - instance.zone_top))
    if len(hot) == 0:
        return None
    return int(times[hot[0]]), int(times[hot[-1] + 1])


def _clipped(instance: LayoutInstance, members: np.ndarray, start: int,
             end: int) -> tuple[LayoutInstance, np.ndarray]:
    """The members live in ``[start, end)`` (instance indices) and the whole instance with
    every lifetime clipped to that window."""
    inside = members[(instance.lower[members] < end) & (instance.upper[members] > start)]
    clipped = replace(instance, lower=np.clip(instance.lower, start, end),
                      upper=np.clip(instance.upper, start, end))
    return clipped, inside


def _window_layout(
    instance: LayoutInstance, inside: np.ndarray, capacity: int, deadline: float,
    attempt_end: float, options: ExactOptions, effort: float, cpsat: bool,
) -> tuple[str, dict[int, int]]:
    """The window's offsets under ``capacity``: canonical search (``effort`` of its moves,
    bounded so that whether it finds one does not depend on the time left, only cut at
    ``deadline``), then, if ``cpsat``, CP-SAT with a share of the attempt's time (until
    ``attempt_end``)."""
    nodes = int(effort * (_BASE_NODES + _NODES_PER_BUFFER * len(inside)))
    found = canonical_portfolio(instance, inside, capacity=capacity, node_budget=nodes,
                                deadline=deadline)
    if found is not None:
        return "FIT", found
    seconds = (attempt_end - time.perf_counter()) * _WINDOW_CPSAT_SHARE
    if seconds <= 0 or not cpsat:
        return "UNKNOWN", {}
    result = decide_component(instance, inside, upper=capacity,
                              options=replace(options, time_limit=seconds))
    return result.status if result.arena is None else "FIT", result.offsets


def _complete(
    instance: LayoutInstance, members: np.ndarray, window: dict[int, int], capacity: int,
    deadline: float, options: ExactOptions, heuristics_by: float,
) -> dict[int, int] | None:
    """Every member under ``capacity`` with the window's buffers fixed where ``window`` puts
    them, or None: heuristics around them (every one unless ``heuristics_by`` has passed: on
    the rematerialization traces measured, the one that fits the sides was never the first),
    then CP-SAT for each group still over, until ``deadline``."""
    sub = select(instance, members)
    fixed = sub.fixed.copy()
    fixed_off = sub.fixed_off.copy()
    for k, i in enumerate(members.tolist()):
        if i in window:
            fixed[k], fixed_off[k] = True, window[i]
    sub = replace(sub, fixed=fixed, fixed_off=fixed_off)
    placed = run_heuristics(sub, deadline=heuristics_by)
    offsets = fixed_off.copy()
    for group in time_components(sub.lower, sub.upper, sub.free_idx):
        fits = [r.offsets for r in placed
                if int((r.offsets[group] + sub.size[group]).max()) <= capacity]
        if fits:
            offsets[group] = fits[0][group]
            continue
        left = deadline - time.perf_counter()
        if left <= 0:
            return None
        result = decide_component(sub, group, upper=capacity,
                                  options=replace(options, time_limit=left))
        if result.arena is None:
            return None
        for k, off in result.offsets.items():
            offsets[k] = off
    return {int(i): int(off) for i, off in zip(members.tolist(), offsets.tolist(), strict=True)}


def window_layout(
    instance: LayoutInstance, members: np.ndarray, *, capacity: int, deadline: float,
    options: ExactOptions, effort: float = 1.0, cpsat: bool = True,
) -> WindowOutcome:
    """Offsets (units) for the free buffers ``members`` (one time component, no pre-placed
    buffers among or around them) with every end at most ``capacity``, by hot windows (module
    docstring), before ``deadline`` (``time.perf_counter()``); windows holding most of the
    component are skipped, so on instances tight everywhere this returns "UNKNOWN" at once.
    ``effort``: the share of the canonical search's moves per window; ``cpsat``: whether a
    window the canonical search misses goes to CP-SAT (the only proofs)."""
    tried = 0
    seen: set[tuple[int, int]] = set()
    for share in WINDOW_SHARES:
        span = hot_window(instance, members, capacity, share)
        if span is None or span in seen:
            continue
        seen.add(span)
        clipped, inside = _clipped(instance, members, *span)
        if len(inside) > _MAX_WINDOW_SHARE * len(members):
            continue
        left = deadline - time.perf_counter()
        if left <= 0:
            break
        tried += 1
        # each window gets an equal part of the time left to the windows still to try
        attempt_end = time.perf_counter() + left / (len(WINDOW_SHARES) - len(seen) + 1)
        status, window = _window_layout(clipped, inside, capacity, deadline, attempt_end,
                                        options, effort, cpsat)
        if status == "INFEASIBLE":
            return WindowOutcome("INFEASIBLE", {}, tried)
        if status != "FIT":
            continue
        offsets = _complete(instance, members, window, capacity, attempt_end, options,
                            heuristics_by=deadline)
        if offsets is not None:
            return WindowOutcome("FIT", offsets, tried)
    return WindowOutcome("UNKNOWN", {}, tried)
