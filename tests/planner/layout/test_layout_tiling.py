"""Gluing at full times (planner.layout.tiling) and the boundary constraints it gives CP-SAT.

- exactness: on guillotine-cut instances (every step full) the glued instance, decided by
  CP-SAT with its boundaries, expands to a valid layout at the capacity; on small random
  instances at their brute-force optimum, gluing keeps a layout there and none one unit below;
- the rules themselves on hand-made cases (a time cut glued, one lifetime stacked, an
  alignment that forbids stacking, sides that may split into several intervals);
- efficacy: the boundary constraints are what lets CP-SAT decide a tight instance of the
  layout bench within a fraction of a second.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from bench.layout.generators import tight_instance
from planner.layout import Buffer, check_layout, exact
from planner.layout.exact import ExactOptions, decide_component
from planner.layout.instance import build_instance
from planner.layout.intervals import time_components
from planner.layout.reductions import stack_always_live
from planner.layout.tiling import one_interval, reduce_tiling
from tests.support.layout import brute_force_arena, random_buffers, tight_buffers, unit_instance


def _decide_glued(buffers: list[Buffer], capacity: int,
                  seconds: float = 20.0) -> dict[str, int] | None:
    """Offsets (bytes) of every buffer within ``capacity`` bytes, each component glued and
    decided by CP-SAT with its boundaries; None if one is proven not to fit."""
    instance = stack_always_live(build_instance(buffers, 64))
    offsets = instance.fixed_off.copy()
    cap = capacity // instance.unit
    for comp in time_components(instance.lower, instance.upper, instance.free_idx):
        tiling = reduce_tiling(instance, comp, cap)
        if tiling is None:
            result = decide_component(instance, comp, upper=cap,
                                      options=ExactOptions(time_limit=seconds))
            found = result.offsets
        else:
            result = decide_component(tiling.instance, tiling.members, upper=cap,
                                      options=ExactOptions(time_limit=seconds),
                                      boundaries=tiling.boundaries)
            found = tiling.expand(result.offsets) if result.arena is not None else {}
        if result.status == "INFEASIBLE":
            return None
        assert result.arena is not None, "not decided in time"
        for i, off in found.items():
            offsets[i] = off
    if int((offsets + instance.size).max()) > cap:
        return None  # the buffers stacked at the bottom alone exceed it
    return {bid: int(off) * instance.unit
            for bid, off in zip(instance.ids, offsets.tolist(), strict=True)}


@pytest.mark.parametrize("seed", range(8))
def test_glued_tight_instances_expand_to_valid_layouts_at_capacity(seed: int) -> None:
    buffers = tight_buffers(120, seed, capacity_units=48, horizon=30)
    instance = stack_always_live(build_instance(buffers, 64))
    glued = 0
    for comp in time_components(instance.lower, instance.upper, instance.free_idx):
        tiling = reduce_tiling(instance, comp, 48)
        if tiling is None:  # one section: no time inside it
            assert len(np.unique(np.concatenate((instance.lower[comp],
                                                 instance.upper[comp])))) == 2
            continue
        assert tiling.full_share == 1.0
        glued += len(comp) - len(tiling.members)
    assert glued > 0
    offsets = _decide_glued(buffers, 48 * 64)
    assert offsets is not None
    assert check_layout(buffers, offsets) == []
    assert max(offsets[b.id] + b.size for b in buffers) <= 48 * 64


@pytest.mark.parametrize("seed", range(30))
def test_gluing_keeps_the_brute_force_optimum(seed: int) -> None:
    rng = random.Random(2000 + seed)
    buffers = random_buffers(rng, rng.randint(2, 6))
    optimum = brute_force_arena(buffers)
    offsets = _decide_glued(buffers, optimum)
    assert offsets is not None
    assert check_layout(buffers, offsets) == []
    assert max(offsets[b.id] + b.size for b in buffers) <= optimum
    assert _decide_glued(buffers, optimum - 64) is None



def test_a_time_cut_and_a_stack_of_one_lifetime_are_glued() -> None:
    # capacity 10 over [0, 4): A over [0, 2) and B over [2, 4), 6 each (one ends and one
    # starts at 2: glued), beside C over [0, 4), 4
    rows = [(0, 2, 6), (2, 4, 6), (0, 4, 4)]
    tiling = reduce_tiling(unit_instance(rows), np.arange(3), 10)
    assert tiling is not None
    assert sorted(tiling.parts) == [((0, 0), (1, 0)), ((2, 0),)]
    # two pieces of one lifetime end at 3 where one starts: one block of their total size
    rows = [(0, 3, 2), (0, 3, 3), (3, 5, 5), (0, 5, 5)]
    tiling = reduce_tiling(unit_instance(rows), np.arange(4), 10)
    assert tiling is not None
    assert sorted(len(p) for p in tiling.parts) == [1, 3]  # the stack, then the time cut
    glued = next(p for p in tiling.parts if len(p) == 3)
    assert sorted(glued) == [(0, 0), (1, 2), (2, 0)]
    assert tiling.expand({b: 0 for b in range(len(tiling.parts))})[1] == 2


def test_no_stack_where_the_order_would_decide_the_alignment() -> None:
    # sizes 2 and 3 with alignments 2 and 1: stacked 2 then 3 keeps both aligned, 3 then 2
    # does not, so the stack is not one block of any order
    rows = [(0, 3, 2), (0, 3, 3), (3, 5, 5), (0, 5, 5)]
    tiling = reduce_tiling(unit_instance(rows, steps=[2, 1, 1, 1]), np.arange(4), 10)
    assert tiling is not None
    assert len(tiling.members) == 4
    assert [b.contiguous for b in tiling.boundaries] == [True]


def test_nothing_full_means_no_tiling() -> None:
    assert reduce_tiling(unit_instance([(0, 2, 3), (2, 4, 3)]), np.arange(2), 10) is None


def test_one_interval() -> None:
    assert one_interval([3, 4], [7])
    assert one_interval([3, 4], [2, 5])  # no proper part of one side matches one of the other
    assert not one_interval([3, 4], [3, 4])  # {3} <-> {3} and {4} <-> {4} may lie apart
    assert not one_interval([1] * 13, [2] * 6 + [1])  # too many to enumerate: not shown


def test_the_boundaries_let_cp_sat_decide_a_tight_bench_instance() -> None:
    """tight-300-s2 of the layout bench, glued (300 -> 184 buffers): with the boundary
    constraints, the bottom-left CP-SAT search decides it within 0.1 s; without them the same
    search took 1.8-2.7 s (measured), so 0.6 s separates them with room on either side."""
    buffers, capacity = tight_instance(300, 2)
    instance = stack_always_live(build_instance(buffers, 64))
    cap = capacity // instance.unit
    comp = max(time_components(instance.lower, instance.upper, instance.free_idx), key=len)
    tiling = reduce_tiling(instance, comp, cap)
    assert tiling is not None

    def decided(boundaries: tuple) -> bool:
        base = exact._build(tiling.instance, tiling.members, floor=cap, upper=cap, hint=None,
                            minimize=False, boundaries=boundaries)
        model = exact._with_search(base, tiling.instance, tiling.members, "longest_first")
        result = exact._run(model, tiling.instance, tiling.members, floor=cap, upper=cap,
                            seconds=0.6, workers=1, seed=0, decide=True, fixed_search=True)
        if result.arena is None:
            return False
        assert result.arena <= cap
        return True

    assert decided(tiling.boundaries)
    assert not decided(())
