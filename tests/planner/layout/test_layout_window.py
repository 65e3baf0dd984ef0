"""The hot-window decomposition (planner.layout.window): real traces at the live-bytes bound, a
window's proof that the bound cannot be reached, and no work where everything is tight."""

from __future__ import annotations

import time
from pathlib import Path

from planner.layout import Buffer, check_layout, lower_bound, plan_layout, read_buffers_csv
from planner.layout.bounds import live_bound_units
from planner.layout.exact import ExactOptions
from planner.layout.instance import build_instance
from planner.layout.reductions import stack_always_live
from planner.layout.window import hot_window, window_layout
from tests.support.layout import brute_force_arena, tight_buffers

TRACES = Path(__file__).resolve().parents[3] / "bench" / "layout" / "traces"

# the live bytes reach 192 B at steps 0-2, but at step 2 t4 must sit above the 128-aligned t3
# while steps 0-1 (t1 under t0, then t0 over t2 and t4) keep it in the lowest 128 B: 256 B needed
GADGET = [
    Buffer("t0", 0, 2, 64),
    Buffer("t1", 0, 1, 128, alignment=128),
    Buffer("t2", 1, 2, 64),
    Buffer("t3", 2, 4, 64, alignment=128),
    Buffer("t4", 1, 3, 64),
]
# a chain of loose steps after the gadget, in its time component (two 64 B buffers live at once)
TAIL = [Buffer(f"z{k}", 3 + k, 5 + k, 64) for k in range(12)]


def test_real_trace_reaches_the_bound_through_its_window() -> None:
    """resnet18 at batch 16: 0.06% over the bound after 10 s of the whole-component searches;
    its window (~200 buffers) and then the rest around it fit at the bound."""
    buffers = read_buffers_csv(TRACES / "resnet18_b16.csv")
    layout = plan_layout(buffers, alignment=1, time_limit=10)
    assert check_layout(buffers, layout, 1) == []
    assert layout.arena_size == lower_bound(buffers, 1) == layout.lower_bound
    assert (layout.status, layout.method) == ("OPTIMAL", "hot_window")


def test_window_layout_fits_the_component_under_the_bound() -> None:
    buffers = read_buffers_csv(TRACES / "cached_gpt2_deep_adam.csv")
    instance = stack_always_live(build_instance(buffers, 1))
    bound = live_bound_units(instance)
    members = instance.free_idx
    span = hot_window(instance, members, bound, 0.02)
    assert span is not None and span[0] > instance.lower[members].min()
    outcome = window_layout(instance, members, capacity=bound,
                            deadline=time.perf_counter() + 20, options=ExactOptions(20.0))
    assert outcome.status == "FIT"
    offsets = instance.fixed_off.copy()
    offsets[members] = [outcome.offsets[i] for i in members.tolist()]
    assert int((offsets + instance.size).max()) == bound
    placed = {bid: int(off) for bid, off in zip(instance.ids, offsets.tolist(), strict=True)}
    assert check_layout(buffers, placed, 1) == []


def test_a_window_proves_the_bound_unreachable() -> None:
    assert lower_bound(GADGET) == 192 and brute_force_arena(GADGET) == 256
    buffers = GADGET + TAIL
    assert lower_bound(buffers) == 192
    instance = build_instance(buffers, 64)
    outcome = window_layout(instance, instance.free_idx, capacity=3,
                            deadline=time.perf_counter() + 10, options=ExactOptions(10.0))
    assert outcome.status == "INFEASIBLE" and outcome.windows >= 1
    layout = plan_layout(buffers, time_limit=10)
    assert check_layout(buffers, layout) == []
    assert layout.live_bytes_bound == 192 and layout.lower_bound == layout.arena_size == 256
    assert layout.status == "OPTIMAL"


def test_no_window_where_every_step_is_tight() -> None:
    """A 100%-packed instance is all window: nothing tried, no time spent."""
    instance = build_instance(tight_buffers(80, seed=3), 64)
    bound = live_bound_units(instance)
    assert hot_window(instance, instance.free_idx, bound, 0.0) == (
        int(instance.lower.min()), int(instance.upper.max()))
    started = time.perf_counter()
    outcome = window_layout(instance, instance.free_idx, capacity=bound,
                            deadline=started + 10, options=ExactOptions(10.0))
    assert (outcome.status, outcome.windows) == ("UNKNOWN", 0)
    assert time.perf_counter() - started < 1.0
