"""The pipeline's clock (planner.time_budget): what each phase is given once the time is spent.

Issue 14: the whole request returns within the limit + 5% (+1 s under 20 s). The 20,000-op chain
at a 2 s limit spent 6 s: each late phase was still given a full second, and building and
validating the plan (about 1 s there, which no limit shortens) were given nothing; GPT-2-small
at 5 s spent 6.3-6.7 s: the time kept back for them was half what they took.
"""

from __future__ import annotations

import time

import pytest

from planner.time_budget import FINISH_S_PER_VALUE, PHASE_FLOOR_S, TimeBudget

# GPT-2-small with Adam in ONNX Runtime's extended rewrite (ops, tensors), as measured in
# planner.time_budget.
GPT2_SMALL = (4_246, 4_778)


def allowed(limit_s: float) -> float:
    return limit_s * 1.05 + (1.0 if limit_s < 20 else 0.0)


def spent(limit_s: float, size: tuple[int, int], seconds: float) -> TimeBudget:
    """A request's clock on a graph of `size` (ops, tensors) as it stands `seconds` after the
    request began."""
    return TimeBudget.for_graph(limit_s, *size, started=time.perf_counter() - seconds)


def test_the_reserve_grows_with_the_graph_and_the_phases_share_the_rest():
    clock = TimeBudget.for_graph(2.0, 20_000, 20_000)
    assert clock.reserve_s == pytest.approx(40_000 * FINISH_S_PER_VALUE)
    assert TimeBudget.for_graph(2.0, 20_000, 30_000).reserve_s > clock.reserve_s
    assert TimeBudget.for_graph(2.0, 30_000, 20_000).reserve_s > clock.reserve_s
    assert TimeBudget.for_graph(1.0, 10**6, 10**6).usable() == 0.0
    small = TimeBudget.for_graph(5.0, *GPT2_SMALL)
    assert small.usable() == pytest.approx(5.0 - small.reserve_s)
    assert small.order(maybe_fits=False) == pytest.approx(0.1 * small.usable())


def test_the_reserve_covers_building_and_validating_gpt2_small():
    """Building (its layout left out) and validating GPT-2-small's unfilled remat plan at 5 s
    took 0.50-0.55 s on the development machine (planner.time_budget): kept back per op alone
    (0.25 s), its 5 s requests took 6.3-6.7 s of the 6.25 s allowed."""
    assert TimeBudget.for_graph(5.0, *GPT2_SMALL).reserve_s >= 0.5


@pytest.mark.parametrize("limit_s", [0.5, 2.0, 5.0])
def test_late_phases_of_a_short_request_fit_in_the_allowed_overrun(limit_s):
    """Once the phases' share of the limit is spent, a remat solve and its layout still get the
    floor (a phase cut to nothing returns no plan), and with the reserve for building and
    validating they end within the allowance."""
    clock = spent(limit_s, GPT2_SMALL, TimeBudget.for_graph(limit_s, *GPT2_SMALL).usable())
    late = clock.remat(0) + clock.remat_layout()
    assert clock.remat(0) == clock.remat_layout() == pytest.approx(0.1 * limit_s)
    assert clock.elapsed() + late + clock.reserve_s <= allowed(limit_s)


def test_long_limits_keep_a_full_second_for_a_late_phase():
    clock = spent(60.0, (1_000, 1_000), 60.0)
    assert clock.floor() == PHASE_FLOOR_S
    assert clock.left() == PHASE_FLOOR_S
    assert spent(60.0, (1_000, 1_000), 10.0).left() == pytest.approx(
        60.0 - 10.0 - clock.reserve_s, abs=0.01)
