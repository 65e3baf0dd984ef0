"""plan_layout end to end: pre-placed buffers, zones, capacity, time limits, determinism."""

from __future__ import annotations

import pytest

from planner.errors import InfeasibleError, InvalidInputError
from planner.layout import Buffer, check_layout, heuristic_layout, lower_bound, plan_layout
from tests.support.layout import tight_buffers


def test_lower_bound_rounds_sizes_and_counts_zones() -> None:
    buffers = [Buffer("a", 0, 2, 100), Buffer("b", 1, 3, 10), Buffer("c", 2, 4, 200)]
    assert lower_bound(buffers) == 64 + 256  # step 2: b (10 -> 64) + c (200 -> 256)
    assert lower_bound(buffers, alignment=8) == 16 + 200
    zoned = buffers + [Buffer("w", 3, 4, 64, zone="persistent")]
    assert lower_bound(zoned) == 64 + 64 + 256  # the zone is reserved for the whole step
    assert lower_bound([Buffer("p", 0, 1, 64, offset=1024)]) == 1088
    assert lower_bound([]) == 0


def test_empty_and_invalid_arguments() -> None:
    empty = plan_layout([])
    assert (empty.arena_size, empty.status, empty.offsets) == (0, "OPTIMAL", {})
    buffers = [Buffer("a", 0, 1, 64)]
    for kwargs in ({"alignment": 3}, {"capacity": -1}, {"time_limit": 0}, {"workers": 0}):
        with pytest.raises(InvalidInputError):
            plan_layout(buffers, **kwargs)
    for bad in (
        [Buffer("a", 0, 1, 64), Buffer("a", 1, 2, 64)],
        [Buffer("a", 2, 2, 64)],
        [Buffer("a", 0, 1, 0)],
        [Buffer("a", 0, 1, 64, alignment=24)],
        [Buffer("a", 0, 1, 64, offset=32)],
        [Buffer("a", 0, 1, 64, offset=0, zone="persistent")],
    ):
        with pytest.raises(InvalidInputError):
            plan_layout(bad)


def test_pre_placed_buffers_keep_their_offsets() -> None:
    buffers = [
        Buffer("pinned", 0, 10, 256, offset=512),
        Buffer("low", 0, 5, 512),
        Buffer("hi", 3, 8, 512),
        Buffer("late", 6, 10, 128),
    ]
    layout = plan_layout(buffers, time_limit=5)
    assert check_layout(buffers, layout) == []
    assert layout.offsets["pinned"] == 512
    assert layout.arena_size == layout.lower_bound  # proven optimal
    clash = [Buffer("x", 0, 4, 128, offset=0), Buffer("y", 2, 6, 128, offset=64)]
    with pytest.raises(InvalidInputError, match="'x' and 'y' overlap"):
        plan_layout(clash)


def test_persistent_zones_sit_contiguously_at_the_bottom() -> None:
    buffers = [
        Buffer("act0", 0, 3, 300),
        Buffer("param0", 0, 10, 100, zone="persistent"),
        Buffer("opt0", 0, 10, 64, zone="optimizer"),
        Buffer("param1", 0, 10, 40, zone="persistent"),
        Buffer("act1", 2, 9, 500),
        Buffer("opt1", 0, 10, 100, alignment=256, zone="optimizer"),
    ]
    layout = plan_layout(buffers, time_limit=5)
    assert check_layout(buffers, layout) == []
    off = layout.offsets
    # persistent first (first seen), in input order, contiguous; then the optimizer zone
    assert (off["param0"], off["param1"], off["opt0"], off["opt1"]) == (0, 128, 192, 256)
    assert min(off["act0"], off["act1"]) >= 512  # everything else above the zones
    assert layout.arena_size == lower_bound(buffers) == 512 + 320 + 512


def test_capacity_fits_or_raises_with_the_smallest_feasible_size() -> None:
    buffers = tight_buffers(20, seed=3)
    need = lower_bound(buffers)
    fitted = plan_layout(buffers, capacity=need, time_limit=10)
    assert check_layout(buffers, fitted) == [] and fitted.arena_size <= need
    with pytest.raises(InfeasibleError) as info:
        plan_layout(buffers, capacity=need - 1)
    assert info.value.smallest_feasible == need and not info.value.is_lower_bound
    # proven infeasible above the live bytes: the pre-placed f splits the arena
    split = [Buffer("f", 0, 2, 64, offset=64), Buffer("g", 0, 1, 128), Buffer("h", 1, 2, 64)]
    assert lower_bound(split) == 192
    with pytest.raises(InfeasibleError) as info:
        plan_layout(split, capacity=192, time_limit=5)
    assert info.value.smallest_feasible == 256 and not info.value.is_lower_bound
    assert plan_layout(split, time_limit=5).arena_size == 256


def test_tight_instance_is_closed_by_the_exact_phase() -> None:
    """The canonical search or CP-SAT (whichever finds it first) reaches the bound."""
    buffers = tight_buffers(60, seed=11)
    greedy = heuristic_layout(buffers)
    layout = plan_layout(buffers, time_limit=20)
    assert check_layout(buffers, layout) == []
    assert greedy.arena_size > layout.lower_bound  # the heuristics alone do not reach it
    assert layout.arena_size == lower_bound(buffers) == 64 * 64
    assert (layout.status, layout.gap, layout.timed_out) == ("OPTIMAL", 0.0, False)
    assert layout.method in ("canonical", "cpsat")


def test_time_limit_returns_the_best_valid_layout() -> None:
    buffers = tight_buffers(250, seed=5, capacity_units=512, horizon=200)
    layout = plan_layout(buffers, time_limit=0.001)  # spent by the heuristics already
    assert check_layout(buffers, layout) == []
    assert layout.status == "FEASIBLE" and layout.timed_out
    assert layout.arena_size > layout.lower_bound == lower_bound(buffers)
    assert layout.gap == (layout.arena_size - layout.lower_bound) / layout.lower_bound > 0


@pytest.mark.parametrize("workers", [1, 2])
def test_same_seed_gives_the_same_offsets(workers: int) -> None:
    buffers = tight_buffers(40, seed=2)
    first = plan_layout(buffers, workers=workers, seed=5, time_limit=20)
    second = plan_layout(buffers, workers=workers, seed=5, time_limit=20)
    assert first.method in ("canonical", "cpsat") and first.status == "OPTIMAL"
    assert first.offsets == second.offsets


def test_alignment_gap_is_proven_optimal() -> None:
    """q (256-aligned) cannot sit right above the zone: the live bytes (448) are not reachable,
    and the exact model proves 512 optimal."""
    buffers = [
        Buffer("p", 0, 9, 100, offset=128),
        Buffer("q", 1, 2, 10, alignment=256),
        Buffer("w", 0, 9, 64, zone="persistent"),
    ]
    layout = plan_layout(buffers, time_limit=5)
    assert check_layout(buffers, layout) == []
    assert (layout.live_bytes_bound, layout.arena_size, layout.lower_bound) == (448, 512, 512)
    assert layout.status == "OPTIMAL" and not layout.timed_out
    assert layout.offsets == {"p": 128, "q": 256, "w": 0}


def test_independent_components_and_a_pinned_buffer_across_them() -> None:
    """Two tight phases separated in time (a cut line) under a pre-placed buffer live in both:
    each phase is solved on its own, around the pinned one, to the lower bound."""
    first = tight_buffers(30, seed=1, capacity_units=64, horizon=20)
    second = [
        Buffer(f"late_{b.id}", b.lower + 20, b.upper + 20, b.size)
        for b in tight_buffers(30, seed=2, capacity_units=32, horizon=20)
    ]
    pinned = Buffer("pinned", 0, 40, 64, offset=64 * 64)
    buffers = first + second + [pinned]
    layout = plan_layout(buffers, time_limit=20)
    assert check_layout(buffers, layout) == []
    assert layout.offsets["pinned"] == 64 * 64
    assert layout.arena_size == lower_bound(buffers) == 65 * 64
    assert layout.status == "OPTIMAL"


def test_tight_300_buffers_are_solved_at_their_capacity() -> None:
    buffers = tight_buffers(300, seed=4, capacity_units=1024, horizon=300)
    capacity = 1024 * 64
    layout = plan_layout(buffers, capacity=capacity, time_limit=60)
    assert check_layout(buffers, layout) == []
    assert layout.arena_size == capacity and layout.status == "OPTIMAL"


def test_known_offsets_that_lay_the_buffers_out_are_the_answer():
    """A layout kept from before (the smallest plan a refusal named) is given back as it was,
    however little time is left; one that overlaps, or exceeds the capacity, is not used."""
    buffers = [Buffer("a", 0, 2, 64), Buffer("b", 1, 3, 64), Buffer("c", 2, 4, 64)]
    wasteful = {"a": 0, "b": 64, "c": 128}  # valid, though c could sit on a
    layout = plan_layout(buffers, alignment=64, known=wasteful)
    assert layout.offsets == wasteful and layout.method == "known"
    assert layout.arena_size == 192 and layout.status == "FEASIBLE"
    assert plan_layout(buffers, alignment=64).arena_size == 128
    overlapping = {"a": 0, "b": 0, "c": 128}
    assert plan_layout(buffers, alignment=64, known=overlapping).method != "known"
    assert plan_layout(buffers, alignment=64, capacity=128, known=wasteful).arena_size == 128
