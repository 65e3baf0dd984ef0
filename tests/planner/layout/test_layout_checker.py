"""The independent checker rejects hand-made invalid layouts and accepts valid ones."""

from __future__ import annotations

import random

import pytest

from planner.layout import Buffer, Layout, check_layout
from planner.layout.checker import _disjoint


def _layout(offsets: dict[str, int], arena: int) -> Layout:
    return Layout(offsets=offsets, arena_size=arena, lower_bound=arena, status="FEASIBLE",
                  method="hand", solve_seconds=0.0)


BUFFERS = [
    Buffer("a", 0, 3, 100),
    Buffer("b", 2, 5, 64),
    Buffer("c", 3, 6, 128),  # starts when a ends: may share a's bytes (half-open lifetimes)
]


def test_valid_layout_has_no_violations() -> None:
    assert check_layout(BUFFERS, _layout({"a": 0, "b": 128, "c": 0}, 192)) == []


def test_overlap_in_time_and_address_is_reported() -> None:
    problems = check_layout(BUFFERS, _layout({"a": 0, "b": 64, "c": 128}, 256))
    assert len(problems) == 1
    assert "'a' and 'b' overlap" in problems[0]
    assert "steps [2, 3)" in problems[0] and "bytes [64, 100)" in problems[0]


def test_touching_in_time_is_not_an_overlap() -> None:
    buffers = [Buffer("x", 0, 2, 64), Buffer("y", 2, 4, 64)]
    assert check_layout(buffers, _layout({"x": 0, "y": 0}, 64)) == []


def test_out_of_arena_and_negative_offsets() -> None:
    problems = check_layout(BUFFERS, _layout({"a": 0, "b": 128, "c": 0}, 150))
    assert any("'b'" in p and "past the arena size 150" in p for p in problems)
    problems = check_layout([Buffer("a", 0, 1, 64)], _layout({"a": -64}, 64))
    assert any("below the arena start" in p for p in problems)


def test_misaligned_offset() -> None:
    problems = check_layout(BUFFERS, _layout({"a": 0, "b": 160, "c": 0}, 256), alignment=64)
    assert problems == ["buffer 'b' offset 160 is not a multiple of 64"]
    assert check_layout(BUFFERS, _layout({"a": 0, "b": 160, "c": 0}, 256), alignment=32) == []
    own = [Buffer("p", 0, 1, 10, alignment=256)]
    assert check_layout(own, _layout({"p": 64}, 512)) == [
        "buffer 'p' offset 64 is not a multiple of 256"
    ]


def test_moved_fixed_offset_and_missing_or_unknown_ids() -> None:
    buffers = [Buffer("w", 0, 4, 64, offset=128), Buffer("v", 0, 4, 64)]
    problems = check_layout(buffers, _layout({"w": 0, "v": 64}, 192))
    assert problems == ["pre-placed buffer 'w' was moved from offset 128 to 0"]
    problems = check_layout(buffers, _layout({"w": 128, "ghost": 0}, 192))
    assert "layout has an offset for unknown buffer 'ghost'" in problems
    assert "buffer 'v' has no offset" in problems


def test_plain_offset_mapping_is_accepted() -> None:
    assert check_layout(BUFFERS, {"a": 0, "b": 128, "c": 0}) == []
    assert check_layout(BUFFERS, {"a": 0, "b": 0, "c": 0})


@pytest.mark.parametrize("seed", range(200))
def test_the_sweep_clears_exactly_the_layouts_the_pairwise_scan_clears(seed: int) -> None:
    """The O(n log n) sweep that clears valid layouts (a 24,000-buffer chain took 0.4 s pair by
    pair) never clears one with an overlap, and clears every valid one it is given: greedy
    layouts are valid, and one buffer moved (often onto another) makes them invalid."""
    rng = random.Random(seed)
    buffers = []
    for k in range(rng.randint(2, 60)):
        lower = rng.randrange(30)
        buffers.append(Buffer(f"b{k}", lower, lower + rng.randint(1, 12), rng.randint(1, 40)))
    offsets: dict[str, int] = {}
    for b in buffers:  # first fit by address among the buffers placed so far
        taken = sorted((offsets[o.id], offsets[o.id] + o.size) for o in buffers
                       if o.id in offsets and o.lower < b.upper and b.lower < o.upper)
        at = 0
        for start, end in taken:
            if at + b.size <= start:
                break
            at = max(at, end)
        offsets[b.id] = at
    if seed % 2:
        offsets[rng.choice(buffers).id] = rng.randrange(60)
    placed = [(b, offsets[b.id]) for b in buffers]
    pairwise = not any(
        a.lower < b.upper and b.lower < a.upper and oa < ob + b.size and ob < oa + a.size
        for i, (a, oa) in enumerate(placed) for b, ob in placed[i + 1:])
    assert _disjoint(placed) == pairwise
    assert (check_layout(buffers, offsets, alignment=1) == []) == pairwise
