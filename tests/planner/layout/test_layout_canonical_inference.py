"""The canonical search's inference (planner.layout.canonical: unallocated floors, untileable
basins, fail-first plateaus) never cuts a layout away, and it is what lets the search finish
tight instances within few moves.

- soundness along a known layout: on guillotine-cut instances (100% packed, offsets known) the
  search's state is walked along the known layout, move by move at the section the search
  picks; no check may call a state on that path dead, and the known buffer at the picked
  section must be one of the search's candidates there;
- against brute force: every member of the wide portfolio finds a layout of small random
  instances at their optimum and none one unit below it;
- efficacy: a tight instance that the inference finishes within a move budget that the plain
  search does not.
"""

from __future__ import annotations

import random
import time

import numpy as np
import pytest

from planner.layout import Buffer, check_layout
from planner.layout.canonical import (
    WIDE_PORTFOLIO,
    _candidates,
    _sections,
    _State,
    canonical_layout,
)
from planner.layout.instance import build_instance
from planner.layout.intervals import time_components
from planner.layout.reductions import stack_always_live
from tests.support.layout import brute_force_arena, random_buffers, tight_buffers, tight_rects


@pytest.mark.parametrize("direction", ["forward", "reversed"])
@pytest.mark.parametrize("seed", range(8))
def test_the_inference_keeps_a_known_layout(seed: int, direction: str) -> None:
    rects = tight_rects(90, seed, capacity_units=48, horizon=30)
    buffers = [Buffer(f"r{i}", t0, t1, (a1 - a0) * 64)
               for i, (t0, t1, a0, a1) in enumerate(rects)]
    instance = build_instance(buffers, 64)
    known = np.array([a0 for _, _, a0, _ in rects]) * 64 // instance.unit
    for members in time_components(instance.lower, instance.upper, instance.free_idx):
        sec = _sections(instance, members, direction, "area")
        state = _State(sec, instance.zone_top, 48 * 64 // instance.unit)
        offset = known[sec.members]
        while state.left:
            assert not state.dead_end()
            s = state.pick()
            level = int(state.eff[s])
            there = [j for j in range(len(sec.members))
                     if not state.placed[j] and sec.first[j] <= s < sec.end[j]
                     and offset[j] == level]
            assert len(there) == 1  # the known layout covers the bottom of that section
            j = there[0]
            assert sec.first[j] == s
            same = {(sec.end[c], sec.size[c], sec.step[c]) for c in _candidates(state, s, level)}
            assert (sec.end[j], sec.size[j], sec.step[j]) in same
            state.place(j, level)


def _layout(buffers: list[Buffer], capacity: int, order: str, direction: str) -> dict | None:
    instance = stack_always_live(build_instance(buffers, 64))
    offsets = instance.fixed_off.copy()
    for comp in time_components(instance.lower, instance.upper, instance.free_idx):
        found, _ = canonical_layout(instance, comp, capacity=capacity // instance.unit,
                                    direction=direction, node_limit=200_000,
                                    deadline=time.perf_counter() + 30, order=order, infer=True)
        if found is None:
            return None
        for i, off in found.items():
            offsets[i] = off
    if int((offsets + instance.size).max()) * instance.unit > capacity:
        return None  # the buffers stacked at the bottom alone exceed it
    return {bid: int(off) * instance.unit
            for bid, off in zip(instance.ids, offsets.tolist(), strict=True)}


@pytest.mark.parametrize("seed", range(30))
def test_every_wide_member_reaches_the_brute_force_optimum(seed: int) -> None:
    rng = random.Random(1000 + seed)
    buffers = random_buffers(rng, rng.randint(2, 6))
    optimum = brute_force_arena(buffers)
    for member in WIDE_PORTFOLIO:
        offsets = _layout(buffers, optimum, member.order, member.direction)
        assert offsets is not None, member
        assert check_layout(buffers, offsets) == []
        assert max(offsets[b.id] + b.size for b in buffers) <= optimum
        assert _layout(buffers, optimum - 64, member.order, member.direction) is None, member


def _finishes(buffers: list[Buffer], capacity: int, *, infer: bool, nodes: int) -> bool:
    instance = stack_always_live(build_instance(buffers, 64))
    for comp in time_components(instance.lower, instance.upper, instance.free_idx):
        found, _ = canonical_layout(instance, comp, capacity=capacity // instance.unit,
                                    direction="forward", node_limit=nodes,
                                    deadline=time.perf_counter() + 60, order="area",
                                    infer=infer)
        if found is None:
            return False
    return True


def test_the_inference_finishes_a_tight_instance_that_the_plain_search_does_not() -> None:
    """160 pieces, seed 2: the plain search needs more than 3,000 moves (measured)."""
    buffers = tight_buffers(160, seed=2)
    assert _finishes(buffers, 64 * 64, infer=True, nodes=1000)
    assert not _finishes(buffers, 64 * 64, infer=False, nodes=1000)


def test_the_inference_keeps_the_deadline_on_long_traces() -> None:
    """A component whose buffers cover tens of millions of (section, buffer) pairs (a long
    eviction schedule with values held throughout) would take seconds to prepare the inference
    for, and a fraction of a second at every node: the search gives up by its deadline instead
    (it took 98 s for 0.1 s on the 20,000-op chain's schedule)."""
    steps, long_lived = 8000, 2000
    buffers = [Buffer(f"held{i}", 0, steps, 64) for i in range(long_lived)]
    buffers += [Buffer(f"step{i}", i, i + 1, 64 * (1 + i % 3)) for i in range(steps)]
    instance = build_instance(buffers, 64)
    (members,) = time_components(instance.lower, instance.upper, instance.free_idx)
    capacity = (long_lived + 3) * 64 // instance.unit  # what is live at the busiest steps
    for member in WIDE_PORTFOLIO[:2]:
        started = time.perf_counter()
        found, exhausted = canonical_layout(
            instance, members, capacity=capacity, direction=member.direction, node_limit=10**6,
            deadline=started + 0.2, order=member.order, infer=True)
        assert (found, exhausted) == (None, False)
        assert time.perf_counter() - started < 1.0  # 16 million pairs: 3 s to prepare
