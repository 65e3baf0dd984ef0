"""A whole request keeps its limit when it must measure its own profile (issue 14, item 4):
loading the graph, ordering, the per-op profile, remat, layout and validation share one clock."""

from __future__ import annotations

import time

import pytest

from planner.ir.graph import load_graph
from planner.pipeline.orchestrate import plan_model_costed
from planner.profile import profile_graph
from planner.time_budget import PIPELINE_SHARES
from schemas.plan import PlanRequest
from tests.support.fixture_zoo import model_path


@pytest.mark.slow  # 15-35 s: `make test` stays under 10 min on 2 cores
def test_a_cold_profile_takes_its_share_of_the_request_clock(tmp_path, monkeypatch):
    """The per-op profile was given no limit: a cold MobileNetV2 profile took 11 s of a 10 s
    request. Now it gets its share of what is left (planner.time_budget: TimeBudget.profile);
    ops it has no time for get labelled estimates, and the request keeps its limit. The limit
    is set from a cold profile timed first, so that the profile's share is below it on any
    host: a fixed 5 s left a whole share to a 0.8 s profile on a fast host (no estimates), and
    a fixed 2.5 s, on a host running plain Python about 2x slower, left the one remat solve no
    room for a layout retry (refused for fragmentation, 27 KB over)."""
    graph = load_graph(model_path("resnet18_narrow"), optimization="extended")
    # A capture is not started when its estimated cost does not fit, so between a share that
    # measures nothing and one that measures everything lies a narrow range: here 1.0-1.4x a
    # whole cold profile (nothing measured at 0.9x, 1,498 of 1,804 ops at 1.1x, all at 1.5x)
    # once ops past 20 us were timed directly (a whole profile 0.8 -> 0.5 s; 0.8x had been
    # inside it). Each limit tried is kept; one of them must leave estimates beside costs. The
    # whole profile is timed again before each: this shared host flips between speeds about 2x
    # apart for minutes (planner.profile.host_speed), and every limit set from a profile timed
    # in the other state missed the range once.
    mixed = []
    for factor in (0.95, 1.1, 1.25, 1.4):
        monkeypatch.setenv("ARENAPLAN_CACHE_DIR", str(tmp_path / f"timing-{factor}"))
        whole = profile_graph(graph, ["cpu"]).total_seconds
        monkeypatch.setenv("ARENAPLAN_CACHE_DIR", str(tmp_path / f"cold-{factor}"))
        limit = factor * whole / PIPELINE_SHARES.profile
        request = PlanRequest(budgets={"cpu": int(2.6 * 2**20)}, time_limit_s=limit)
        started = time.perf_counter()
        costed = plan_model_costed(model_path("resnet18_narrow"), request)
        elapsed = time.perf_counter() - started
        assert elapsed <= limit * 1.05 + 1.0
        assert costed.plan.devices[0].arena_bytes <= request.budgets["cpu"]
        assert costed.measured_profile is not None
        sources = {op.costs["cpu"].source for op in costed.measured_profile.ops}
        mixed.append(sources == {"measured", "estimated"})
    assert any(mixed)
