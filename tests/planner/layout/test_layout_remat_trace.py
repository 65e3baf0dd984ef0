"""Buffer traces of rematerialization schedules: GPT-2-small with Adam at its persistent bytes
plus half of its activations (plan_remat's best schedule, 2,202 storages, and its runner-up,
2,354; alignment 64).

Live bytes stay within 1% of the peak for about a thousand steps, with recomputed copies of a
few sizes; OLLA's pyramid with the rest ordered by lifetime left them 0.99% and 2.55% above the
live bytes.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from planner.layout import check_layout, choose, heuristic_layout, plan_layout
from planner.layout.bounds import live_bound_units
from planner.layout.canonical import canonical_layout
from planner.layout.csv_io import read_buffers_csv
from planner.layout.instance import build_instance
from planner.layout.intervals import time_components
from planner.layout.reductions import stack_always_live

DATA = Path(__file__).parent / "data"
TRACE = DATA / "remat_gpt2_small_adam_frac2.csv"
LIVE_BOUND = 1_949_835_200
BEST = DATA / "remat_gpt2_small_adam_best.csv"


def test_pyramids_packs_the_remat_trace_near_the_live_bytes() -> None:
    buffers = read_buffers_csv(TRACE)
    layout = heuristic_layout(buffers, alignment=64, methods=["pyramids"])
    assert check_layout(buffers, layout, alignment=64) == []
    assert layout.live_bytes_bound == LIVE_BOUND
    assert layout.gap < 0.005
    assert heuristic_layout(buffers, alignment=64, methods=["pyramid"]).gap > 0.02


def test_plan_layout_on_the_remat_trace_is_valid_and_honest() -> None:
    buffers = read_buffers_csv(TRACE)
    layout = plan_layout(buffers, alignment=64, time_limit=1.0)
    assert check_layout(buffers, layout, alignment=64) == []
    assert layout.gap < 0.005
    assert layout.lower_bound == LIVE_BOUND
    assert layout.status == ("OPTIMAL" if layout.arena_size == LIVE_BOUND else "FEASIBLE")


def test_canonical_search_crosses_steps_that_start_nothing_in_one_move() -> None:
    """With 50% to spare any bottom-left construction goes through; it took 148,000 moves
    (one per section raised with nothing to place) before those runs became one move."""
    instance = stack_always_live(build_instance(read_buffers_csv(TRACE), 64))
    live = live_bound_units(instance)
    (component,) = time_components(instance.lower, instance.upper, instance.free_idx)
    found, _ = canonical_layout(instance, component, capacity=live * 3 // 2,
                                direction="reversed", node_limit=20_000,
                                deadline=time.perf_counter() + 30)
    assert found is not None
    assert max(found[i] + int(instance.size[i]) for i in found) <= live * 3 // 2


def test_plan_layout_approaches_the_bound_by_the_hot_window(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The heuristics leave the best schedule's trace 0.68% above the live bytes; windows of a
    layout within 0.41% go through. The windowed component's seconds (a fixed 1.6 s, measured
    on a faster host) are raised here: on a host that runs plain Python about 2x slower the
    approach took 2 s alone and, later in the whole suite, left the heuristics' layout."""
    monkeypatch.setattr(choose, "_WINDOWED_SECONDS", 4.0)
    buffers = read_buffers_csv(BEST)
    assert heuristic_layout(buffers, alignment=64).gap > 0.006
    layout = plan_layout(buffers, alignment=64, time_limit=6.0)
    assert check_layout(buffers, layout, alignment=64) == []
    assert layout.method == "hot_window"
    assert layout.gap < 0.005


def test_plan_layout_of_a_remat_trace_stops_by_itself() -> None:
    """A component with a hot window gets the windows and the approach, not CP-SAT's
    minimization, which never improved a real trace and took whatever time was left (6 s of
    a plan's layout): the layout comes back before its time limit, not cut by it."""
    buffers = read_buffers_csv(TRACE)
    layout = plan_layout(buffers, alignment=64, time_limit=60.0)
    assert check_layout(buffers, layout, alignment=64) == []
    assert layout.status == "FEASIBLE" and not layout.timed_out
    assert layout.gap < 0.005


UNET_FILLED = DATA / "remat_unet_adam_frac3_filled.csv"


def test_a_filled_remat_trace_far_above_its_heuristics_is_approached_by_windows() -> None:
    """UNet-Adam at its persistent bytes plus 30% of its activations, the fill pass's schedule
    (597 storages, live bytes within 1.5% of the budget): pyramid left the arena 16.7% above
    the live bytes, so far that no step was hot under the approach's first capacities, and the
    approach stopped there; windows taken lower fit 0.001% above the live bytes."""
    buffers = read_buffers_csv(UNET_FILLED, default_alignment=64)
    assert heuristic_layout(buffers, alignment=64).gap > 0.1
    layout = plan_layout(buffers, alignment=64, time_limit=6.0)
    assert check_layout(buffers, layout, alignment=64) == []
    assert layout.gap < 0.001


UNET_BEST = DATA / "remat_unet_adam_frac3_best.csv"


def test_an_undecided_window_sends_the_approach_lower_not_higher() -> None:
    """Another schedule of UNet-Adam at the same budget (554 storages): greedy by size leaves
    it 8.6% above the live bytes. The window at 5.6% above them holds most of the component
    and gives up; taken as the floor, it sent the approach upwards and the plan kept greedy by
    size's arena (over the budget: the request fell back to a 1.9x schedule). The windows at
    0.9% above are small and fit 0.001% above the live bytes."""
    buffers = read_buffers_csv(UNET_BEST, default_alignment=64)
    assert heuristic_layout(buffers, alignment=64).gap > 0.08
    layout = plan_layout(buffers, alignment=64, time_limit=6.0, workers=2)
    assert check_layout(buffers, layout, alignment=64) == []
    assert layout.gap < 0.001


RESNET_BEST = DATA / "remat_resnet18_narrow_frac3_best.csv"


def test_where_no_window_applies_the_approach_takes_the_canonical_search(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """ResNet-18-narrow at its persistent bytes plus 30% of its activations, plan_remat's best
    schedule (742 storages, 235 of them persistent): live bytes within 3% of the peak for only
    90 of 3,746 steps. Greedy by size leaves it 7.0% above the live bytes, no window applies
    at the approach's first capacity (4.6% above), and the plan kept greedy by size's arena;
    the canonical search fits that capacity in about 0.1 s. The windowed seconds are raised
    as in the GPT-2-small test above (a slower host)."""
    monkeypatch.setattr(choose, "_WINDOWED_SECONDS", 4.0)
    buffers = read_buffers_csv(RESNET_BEST, default_alignment=64)
    assert heuristic_layout(buffers, alignment=64).gap > 0.06
    layout = plan_layout(buffers, alignment=64, time_limit=6.0)
    assert check_layout(buffers, layout, alignment=64) == []
    assert layout.gap < 0.045
