"""The canonical bottom-left search (planner.layout.canonical) against brute force and the
independent checker: the layouts it returns are valid and within the capacity, it finds the
optimum of small random instances, and it returns None below the optimum."""

from __future__ import annotations

import random
import time

import numpy as np
import pytest

from planner.layout import Buffer, check_layout, plan_layout
from planner.layout.bounds import live_bound_units
from planner.layout.canonical import canonical_portfolio
from planner.layout.instance import LayoutInstance, build_instance
from planner.layout.intervals import time_components
from planner.layout.reductions import stack_always_live
from tests.support.layout import brute_force_arena, random_buffers, tight_buffers


def _search(buffers: list[Buffer], capacity: int, alignment: int = 64) -> dict[str, int] | None:
    """Offsets (bytes) for every buffer with the arena within ``capacity`` bytes, or None."""
    instance = stack_always_live(build_instance(buffers, alignment))
    offsets = instance.fixed_off.copy()
    for comp in time_components(instance.lower, instance.upper, instance.free_idx):
        found = canonical_portfolio(instance, comp, capacity=capacity // instance.unit,
                                    node_budget=100_000, deadline=time.perf_counter() + 30)
        if found is None:
            return None
        for i, off in found.items():
            offsets[i] = off
    return _bytes(instance, offsets)


def _bytes(instance: LayoutInstance, offsets: np.ndarray) -> dict[str, int]:
    return {bid: int(off) * instance.unit
            for bid, off in zip(instance.ids, offsets.tolist(), strict=True)}


@pytest.mark.parametrize("seed", range(40))
def test_small_random_instances_at_their_optimum(seed: int) -> None:
    rng = random.Random(seed)
    buffers = random_buffers(rng, rng.randint(2, 6))
    optimum = brute_force_arena(buffers)
    offsets = _search(buffers, optimum)
    assert offsets is not None
    assert check_layout(buffers, offsets) == []
    assert max(offsets[b.id] + -(-b.size // 64) * 64 for b in buffers) <= optimum
    assert _search(buffers, optimum - 64) is None


@pytest.mark.parametrize(("n", "seed"), [(60, 11), (100, 1), (120, 3)])
def test_tight_instances_fill_the_capacity(n: int, seed: int) -> None:
    buffers = tight_buffers(n, seed=seed)
    capacity = live_bound_units(build_instance(buffers, 64)) * 64
    offsets = _search(buffers, capacity)
    assert offsets is not None and check_layout(buffers, offsets) == []
    assert max(offsets[b.id] + b.size for b in buffers) == capacity


def test_alignments_are_kept() -> None:
    """1-byte default alignment with 256-aligned buffers among odd sizes."""
    rng = random.Random(7)
    buffers = [Buffer(b.id, b.lower, b.upper, b.size - rng.randint(0, 63),
                      alignment=256 if i % 3 == 0 else None)
               for i, b in enumerate(random_buffers(rng, 30, horizon=12))]
    offsets = _search(buffers, 1 << 20, alignment=1)
    assert offsets is not None and check_layout(buffers, offsets, 1) == []
    assert all(offsets[b.id] % 256 == 0 for b in buffers if b.alignment == 256)


def test_plan_layout_reports_the_canonical_search() -> None:
    """A tight instance with one more buffer over its first quarter: the peak is reached there
    only, so too few times are full for the glued CP-SAT route (planner.layout.tiling) and the
    canonical search is what reaches the bound (the heuristics do not)."""
    buffers = [*tight_buffers(60, seed=11), Buffer("extra", 0, 10, 4 * 64)]
    layout = plan_layout(buffers, time_limit=20)
    assert (layout.method, layout.status, layout.gap) == ("canonical", "OPTIMAL", 0.0)
    assert check_layout(buffers, layout) == []


def test_plan_layout_reports_cp_sat_on_a_fully_tight_instance() -> None:
    """Every time full: glued at once and decided by CP-SAT with the boundaries."""
    buffers = tight_buffers(60, seed=11)
    layout = plan_layout(buffers, time_limit=20)
    assert (layout.method, layout.status, layout.gap) == ("cpsat", "OPTIMAL", 0.0)
    assert check_layout(buffers, layout) == []
