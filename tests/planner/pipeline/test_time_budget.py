"""The pipeline's clock (planner.time_budget): what each phase is given once the time is spent.

Issue 14: the whole request returns within the limit + 5% (+1 s under 20 s). The 20,000-op chain
at a 2 s limit spent 6 s: each late phase was still given a full second, and building and
validating the plan (about 1 s there, which no limit shortens) were given nothing.
"""

from __future__ import annotations

import time

import pytest

from planner.time_budget import FINISH_S_PER_OP, PHASE_FLOOR_S, TimeBudget


def allowed(limit_s: float) -> float:
    return limit_s * 1.05 + (1.0 if limit_s < 20 else 0.0)


def spent(limit_s: float, n_ops: int, seconds: float) -> TimeBudget:
    """A request's clock as it stands `seconds` after the request began."""
    return TimeBudget(limit_s, started=time.perf_counter() - seconds,
                      reserve_s=FINISH_S_PER_OP * n_ops)


def test_the_reserve_grows_with_the_graph_and_the_phases_share_the_rest():
    clock = TimeBudget.for_graph(2.0, 20_000)
    assert clock.reserve_s == pytest.approx(20_000 * FINISH_S_PER_OP)
    assert clock.usable() == pytest.approx(2.0 - clock.reserve_s)
    assert clock.order(maybe_fits=False) == pytest.approx(0.1 * clock.usable())
    assert TimeBudget.for_graph(1.0, 10**6).usable() == 0.0


@pytest.mark.parametrize("limit_s", [0.5, 2.0, 5.0])
def test_late_phases_of_a_short_request_fit_in_the_allowed_overrun(limit_s):
    """Once the phases' share of the limit is spent, a remat solve and its layout still get the
    floor (a phase cut to nothing returns no plan), and with the reserve for building and
    validating they end within the allowance."""
    clock = spent(limit_s, 20_000, TimeBudget.for_graph(limit_s, 20_000).usable())
    late = clock.remat(0) + clock.remat_layout()
    assert clock.remat(0) == clock.remat_layout() == pytest.approx(0.1 * limit_s)
    assert clock.elapsed() + late + clock.reserve_s <= allowed(limit_s)


def test_long_limits_keep_a_full_second_for_a_late_phase():
    clock = spent(60.0, 1_000, 60.0)
    assert clock.floor() == PHASE_FLOOR_S
    assert clock.left() == PHASE_FLOOR_S
    assert spent(60.0, 1_000, 10.0).left() == pytest.approx(60.0 - 10.0 - clock.reserve_s,
                                                           abs=0.01)
