"""A buffer trace of a rematerialization schedule: GPT-2-small with Adam at its persistent
bytes plus half of its activations (plan_remat's runner-up, 2,354 storages, alignment 64).

Live bytes stay within 1% of the peak for about a thousand steps, with recomputed copies of a
few sizes; OLLA's pyramid with the rest ordered by lifetime left it 2.55% above the live bytes.
"""

from __future__ import annotations

from pathlib import Path

from planner.layout import check_layout, heuristic_layout, plan_layout
from planner.layout.csv_io import read_buffers_csv

TRACE = Path(__file__).parent / "data" / "remat_gpt2_small_adam_frac2.csv"
LIVE_BOUND = 1_949_835_200


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
