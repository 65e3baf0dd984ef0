"""The exact model and the heuristics against a brute-force optimum on tiny random instances."""

from __future__ import annotations

import random

import pytest

from planner.layout import Buffer, check_layout, heuristic_layout, lower_bound, plan_layout
from planner.layout.choose import exact_layout
from tests.support.layout import brute_force_arena, random_buffers

SEEDS = range(40)


def _instance(seed: int) -> list[Buffer]:
    rng = random.Random(seed)
    return random_buffers(rng, rng.randint(2, 6))


@pytest.mark.parametrize("seed", SEEDS)
def test_exact_model_matches_brute_force(seed: int) -> None:
    buffers = _instance(seed)
    optimum = brute_force_arena(buffers)
    layout = exact_layout(buffers, time_limit=5.0)
    assert check_layout(buffers, layout) == []
    assert layout.arena_size == optimum
    assert layout.status == "OPTIMAL"
    assert lower_bound(buffers) <= optimum


@pytest.mark.parametrize("seed", SEEDS)
def test_plan_layout_is_optimal_and_heuristics_bounded(seed: int) -> None:
    buffers = _instance(seed)
    optimum = brute_force_arena(buffers)
    layout = plan_layout(buffers, time_limit=5.0)
    assert check_layout(buffers, layout) == []
    assert layout.arena_size == optimum
    assert layout.status == "OPTIMAL" and layout.lower_bound == optimum and layout.gap == 0.0
    for method in ("greedy_by_size", "best_fit", "pyramid", "greedy_by_area", "pyramids"):
        heuristic = heuristic_layout(buffers, methods=[method])
        assert check_layout(buffers, heuristic) == []
        assert heuristic.arena_size >= optimum
        assert heuristic.lower_bound <= optimum


def test_fragmentation_case_needs_more_than_the_lower_bound() -> None:
    """Three buffers where the live-bytes bound (2 units) is not reachable: the optimum is 3."""
    u = 64
    buffers = [
        Buffer("a", 0, 2, u),
        Buffer("b", 1, 4, u),
        Buffer("c", 3, 5, u),
        Buffer("d", 0, 1, u),  # under or over a at step 0
        Buffer("e", 2, 3, 2 * u),  # needs two contiguous units while b is live
        Buffer("f", 4, 5, u),
    ]
    optimum = brute_force_arena(buffers)
    layout = plan_layout(buffers, time_limit=5.0)
    assert check_layout(buffers, layout) == []
    assert layout.arena_size == optimum
    assert layout.status == "OPTIMAL"


def test_mixed_alignments_match_brute_force() -> None:
    rng = random.Random(7)
    for _ in range(10):
        buffers = [
            Buffer(b.id, b.lower, b.upper, rng.randint(1, 300),
                   alignment=rng.choice([None, 16, 128, 256]))
            for b in random_buffers(rng, rng.randint(2, 5))
        ]
        optimum = brute_force_arena(buffers)
        for layout in (exact_layout(buffers, time_limit=5.0), plan_layout(buffers, time_limit=5.0)):
            assert check_layout(buffers, layout) == []
            assert layout.arena_size == optimum
