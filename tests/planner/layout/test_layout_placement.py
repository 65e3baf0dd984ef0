"""The placement engine (planner.layout.placement) against a plain scan of every placed buffer:
its index (unions of ranges at sample steps and in a tree of start blocks) and the pyramid's
staircase must not change a single offset.

The reference below is the engine as it was before the index (each buffer's gap search over
all placed buffers live at one of its steps), written with plain loops."""

from __future__ import annotations

import random
import time

import pytest

from planner.layout import Buffer, check_layout, heuristic_layout, lower_bound, placement
from planner.layout.heuristics import HEURISTICS, pyramid_chain, run_heuristics
from planner.layout.instance import LayoutInstance, build_instance
from planner.layout.placement import place_in_order


def _reference(instance: LayoutInstance, order: list[int], fit: str) -> list[int]:
    offsets = instance.fixed_off.tolist()
    lower, upper = instance.lower.tolist(), instance.upper.tolist()
    size, step = instance.size.tolist(), instance.step.tolist()
    placed = instance.obstacle_idx.tolist()
    for i in order:
        lo, hi, s, a = lower[i], upper[i], size[i], step[i]
        hits = sorted((offsets[j], offsets[j] + size[j]) for j in placed
                      if lower[j] < hi and upper[j] > lo)
        gaps = []  # (start, room) in address order
        reach = instance.zone_top
        for off, end in hits:
            start = -(-reach // a) * a
            gaps.append((start, off - start - s))
            reach = max(reach, end)
        gaps.append((-(-reach // a) * a, 1 << 62))
        fitting = [(room, start) for start, room in gaps if room >= 0]
        offsets[i] = min(fitting)[1] if fit == "best" else min(s for _, s in fitting)
        placed.append(i)
    return offsets


def _chain_trace(rng: random.Random, depth: int) -> list[Buffer]:
    """A training step of a deep chain: nested forward activations kept for their backward
    step, short temporaries between them, a few recomputed activations across the middle."""
    buffers, t = [], 0
    ends = []
    for k in range(depth):
        buffers.append(Buffer(f"tmp{k}", t, t + rng.randint(1, 3), rng.randint(1, 9)))
        ends.append(t)
        t += 2
    for k in reversed(range(depth)):
        buffers.append(Buffer(f"act{k}", ends[k], t + 1, rng.randint(1, 9)))
        buffers.append(Buffer(f"grad{k}", t, t + rng.randint(2, 4), rng.randint(1, 9)))
        t += 3
    for k in range(depth // 50):
        start = rng.randrange(t // 2)
        buffers.append(Buffer(f"re{k}", start, start + rng.randint(t // 8, t // 3),
                              rng.randint(1, 9)))
    return buffers


@pytest.mark.parametrize("fit", ["first", "best"])
def test_index_and_staircase_keep_every_offset(fit: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine uses its index from `_INDEX_FROM` buffers to place (here from 100, so that
    the plain reference stays quick); the pyramid's chain is hundreds of nested buffers,
    placed as one range per step."""
    monkeypatch.setattr(placement, "_INDEX_FROM", 100)
    rng = random.Random(3)
    instance = build_instance(_chain_trace(rng, 400), 1)
    chain = pyramid_chain(instance)
    assert len(chain) > 200
    in_chain = set(chain)
    rest = [i for i in instance.free_idx.tolist() if i not in in_chain]
    rng.shuffle(rest)
    want = _reference(instance, chain + rest, fit)
    assert place_in_order(instance, rest, fit, chain=chain).tolist() == want
    assert place_in_order(instance, chain + rest, fit).tolist() == want


def _mixed_trace(rng: random.Random, n: int) -> list[Buffer]:
    """Lifetimes of every length over 600 steps (most short, some across half of them or
    all), sizes of a few units up to thousands, a few alignments and pre-placed buffers."""
    buffers = []
    for k in range(n):
        lo = rng.randrange(600)
        span = rng.choice([4, 4, 4, 40, 300, 600])
        buffers.append(Buffer(f"b{k}", lo, lo + rng.randint(1, span),
                              rng.choice([1, 3, 8, 100, 4096]) * rng.randint(1, 4),
                              alignment=rng.choice([None, None, None, 256])))
    buffers += [Buffer(f"f{k}", 50 * k, 50 * k + rng.randint(1, 200), 512,
                       offset=(1 << 20) + 1024 * k) for k in range(8)]
    return buffers


@pytest.mark.parametrize("alignment", [1, 64])
@pytest.mark.parametrize("fit", ["first", "best"])
@pytest.mark.parametrize("eager", [False, True])
def test_index_keeps_every_offset_on_random_traces(
    fit: str, alignment: int, eager: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past `_INDEX_FROM` buffers, in any order, with lifetimes that span many sample blocks
    (the start tree) or none, pre-placed buffers and alignments. ``eager``: the unions merge
    every placed buffer at once and every search runs with numpy."""
    if eager:
        monkeypatch.setattr(placement, "_PENDING", 0)
        monkeypatch.setattr(placement, "_FEW", 0)
    rng = random.Random(alignment + 2 * eager)
    instance = build_instance(_mixed_trace(rng, placement._INDEX_FROM + 200), alignment)
    assert len(instance.obstacle_idx) and instance.step.max() > 1
    free = instance.free_idx.tolist()
    rng.shuffle(free)
    assert place_in_order(instance, free, fit).tolist() == _reference(instance, free, fit)


@pytest.mark.parametrize("fit", ["first", "best"])
def test_alignments_and_pre_placed_buffers_keep_every_offset(fit: str) -> None:
    """The staircase needs contiguous stacking: with alignment gaps or pre-placed buffers the
    chain is placed like any buffer, with the same offsets."""
    rng = random.Random(5)
    buffers = [Buffer(f"b{i}", lo, lo + rng.randint(1, 40), rng.randint(1, 5000),
                      alignment=rng.choice([None, 256, 1024]))
               for i, lo in enumerate(rng.randrange(100) for _ in range(300))]
    buffers += [Buffer(f"f{i}", 10 * i, 10 * i + 5, 64, offset=1 << 20) for i in range(10)]
    instance = build_instance(buffers, 1)
    assert len(instance.obstacle_idx) and instance.step.max() > 1
    free = instance.free_idx.tolist()
    rng.shuffle(free)
    chain = pyramid_chain(instance)
    rest = [i for i in free if i not in set(chain)]
    got = place_in_order(instance, rest, fit, chain=chain)
    assert got.tolist() == _reference(instance, chain + rest, fit)


def test_the_pyramid_runs_first() -> None:
    """On a 20,000-op chain's plan greedy by size, the first heuristic then, ended 2 bytes
    above the live bytes after 2 s, past the layout's time; the pyramid reaches the bound
    there, as on this chain, where greedy by size does not."""
    buffers = _chain_trace(random.Random(0), 300)
    bound = lower_bound(buffers, alignment=1)
    layout = heuristic_layout(buffers, alignment=1, methods=["pyramid"])
    assert check_layout(buffers, layout, alignment=1) == []
    assert layout.arena_size == bound
    assert heuristic_layout(buffers, alignment=1, methods=["greedy_by_size"]).arena_size > bound
    assert next(iter(HEURISTICS)) == "pyramid"


def test_no_heuristic_starts_when_the_time_left_would_not_cover_the_last(monkeypatch) -> None:
    """Each heuristic takes seconds on long traces: after one that took 0.2 s, another starts
    only with 0.2 s left (the 20,000-op chain's request ran 0.5 s past its limit in the next)."""
    instance = build_instance([Buffer(f"b{i}", i, i + 2, 64 * (1 + i % 3)) for i in range(50)],
                              64)
    ran: list[str] = []
    for name in ("pyramid", "greedy_by_size"):
        place = HEURISTICS[name]

        def slow(inst, name=name, place=place):
            ran.append(name)
            time.sleep(0.2)
            return place(inst)

        monkeypatch.setitem(HEURISTICS, name, slow)
    methods = ("pyramid", "greedy_by_size")
    run_heuristics(instance, methods=methods, deadline=time.perf_counter() + 0.3)
    assert ran == ["pyramid"]
    ran.clear()
    run_heuristics(instance, methods=methods, deadline=time.perf_counter() + 1.0)
    assert ran == ["pyramid", "greedy_by_size"]
