"""The schedule of least peak a bisection found is kept per graph (planner.remat.remembered), so
the budget a refusal names is met by a request for it even when that request's own time is
spent before its search gets there (mlp_sgd at 1 s under CI load: refused naming 64,640 B, then
asked for 64,640 B and refused naming the keep-everything arena, 66,688 B)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from planner.cache_dir import cache_dir
from planner.ir.graph import Graph, load_graph
from planner.memory.liveness import order_lower_bound
from planner.memory.schedule import sequential_schedule
from planner.memory.simulate import simulate
from planner.order import OrderResult, optimize_order
from planner.pipeline.infeasible import smallest_plan
from planner.profile import QUICK_POLICY, profile_graph
from planner.profile.costs import CostTable, costs_from_profile
from planner.remat import remembered, smallest
from planner.remat.heuristics import Candidate
from schemas.plan import PlanRequest
from tests.support.fixture_zoo import model_path
from tests.support.probes import record_probe_aims


@dataclass(frozen=True)
class Setting:
    graph: Graph
    order: OrderResult
    costs: CostTable


@pytest.fixture
def setting(tmp_path, monkeypatch) -> Setting:
    """cnn_bn_momentum with its costs, and a cache of its own (nothing kept before)."""
    monkeypatch.setenv("ARENAPLAN_CACHE_DIR", str(tmp_path))
    graph = load_graph(model_path("cnn_bn_momentum"), optimization="extended")
    order = optimize_order(graph, use_solver=False, time_limit=2)
    costs = costs_from_profile(profile_graph(graph, ["cpu"], policy=QUICK_POLICY), graph, ["cpu"])
    return Setting(graph, order, costs)


def _bisect(s: Setting, time_limit: float) -> smallest.LeastPeak:
    return smallest.least_peak(s.graph, s.order.order, "cpu", s.costs, order_lower_bound(s.graph),
                               s.order.peak_bytes, memory_unit=64, time_limit=time_limit)


def _entry_path() -> Path:
    (path,) = (cache_dir() / remembered.DIRECTORY_NAME).glob("*.json")
    return path


def test_a_bisection_starts_from_the_least_peak_kept_and_needs_no_time_for_it(
        setting: Setting, monkeypatch: pytest.MonkeyPatch) -> None:
    first = _bisect(setting, time_limit=3.0)
    assert first.schedule is not None and first.budget < setting.order.peak_bytes
    kept = remembered.remembered_schedule(setting.graph, "cpu", setting.costs, 64)
    assert kept is not None and kept.stats.peaks["cpu"] == first.budget
    assert kept.schedule.events == first.schedule.schedule.events

    probes = record_probe_aims(monkeypatch)
    again = _bisect(setting, time_limit=0.0)
    assert probes == [] and again.schedule is not None and again.budget == first.budget
    # given time, it only goes lower, aiming below what it kept
    lower = _bisect(setting, time_limit=2.0)
    assert probes and all(aim < first.budget for aim in probes)
    assert lower.budget <= first.budget


def test_without_a_kept_schedule_and_without_time_nothing_is_searched(setting: Setting) -> None:
    assert _bisect(setting, time_limit=0.0).schedule is None


def test_a_request_whose_time_is_spent_lays_out_the_kept_schedule_as_before(
        setting: Setting) -> None:
    """smallest_plan given no time: the plan of the kept schedule, in the layout it had when its
    arena was named (a layout given less time can come out larger)."""
    request = PlanRequest(budgets={"cpu": order_lower_bound(setting.graph)}, time_limit_s=5,
                          graph_optimization="extended")
    assert smallest_plan(setting.graph, request, setting.order, setting.costs, "p",
                         time_limit=0.0) is None
    named = smallest_plan(setting.graph, request, setting.order, setting.costs, "p",
                          time_limit=3.0)
    assert named is not None
    arena = named.plan.devices[0].arena_bytes
    asked = request.model_copy(update={"budgets": {"cpu": arena}})
    again = smallest_plan(setting.graph, asked, setting.order, setting.costs, "q", time_limit=0.0)
    assert again is not None and again.plan.devices[0].arena_bytes == arena
    assert again.layouts["cpu"].method == "known"
    assert again.layouts["cpu"].offsets == named.layouts["cpu"].offsets


def test_a_bisection_replaces_the_kept_schedule_only_with_a_lower_one(setting: Setting) -> None:
    schedule = sequential_schedule(setting.graph, setting.order.order, "cpu")
    keep_all = Candidate("keep everything", None, None, schedule,
                         simulate(setting.graph, schedule, setting.costs, alignment=64))
    remembered.remember_schedule(setting.graph, "cpu", 64, keep_all)
    kept = remembered.remembered_schedule(setting.graph, "cpu", setting.costs, 64)
    assert kept is not None and kept.stats.peaks["cpu"] == keep_all.stats.peaks["cpu"]
    found = _bisect(setting, time_limit=3.0)
    assert found.schedule is not None and found.budget < keep_all.stats.peaks["cpu"]
    written = _entry_path().read_bytes()
    assert json.loads(written)["peak"] == found.budget
    assert _bisect(setting, time_limit=0.0).budget == found.budget  # the kept one, not written
    assert _entry_path().read_bytes() == written


@pytest.mark.parametrize("damage", ["truncated", "wrong peak", "foreign op", "not json"])
def test_a_damaged_or_foreign_entry_is_a_miss(setting: Setting, damage: str) -> None:
    assert _bisect(setting, time_limit=3.0).schedule is not None
    path = _entry_path()
    entry = json.loads(path.read_text())
    if damage == "truncated":
        path.write_text(path.read_text()[: len(path.read_text()) // 2])
    elif damage == "wrong peak":
        path.write_text(json.dumps({**entry, "peak": entry["peak"] - 64}))
    elif damage == "foreign op":
        path.write_text(json.dumps({**entry, "events": [2 * 10**6, *entry["events"]]}))
    else:
        path.write_bytes(b"\xff\x00")
    assert remembered.remembered_schedule(setting.graph, "cpu", setting.costs, 64) is None
    # and the bisection then searches again, and keeps what it finds
    assert _bisect(setting, time_limit=3.0).schedule is not None
    assert remembered.remembered_schedule(setting.graph, "cpu", setting.costs, 64) is not None


def test_another_graph_device_or_alignment_has_its_own_entry(setting: Setting) -> None:
    assert _bisect(setting, time_limit=3.0).schedule is not None
    other = load_graph(model_path("mlp_sgd"))
    assert remembered.remembered_schedule(other, "cpu", setting.costs, 64) is None
    assert remembered.remembered_schedule(setting.graph, "cpu", setting.costs, 256) is None
    assert remembered.remembered_schedule(setting.graph, "cuda:0", setting.costs, 64) is None


@pytest.mark.parametrize("layout", [["not", "a", "dict"], {"arena": "x", "offsets": {"b": "0"}}])
def test_a_damaged_kept_layout_is_laid_out_afresh(setting: Setting, layout: object) -> None:
    request = PlanRequest(budgets={"cpu": order_lower_bound(setting.graph)}, time_limit_s=5,
                          graph_optimization="extended")
    named = smallest_plan(setting.graph, request, setting.order, setting.costs, "p",
                          time_limit=3.0)
    assert named is not None
    path = _entry_path()
    path.write_text(json.dumps({**json.loads(path.read_text()), "layout": layout}))
    again = smallest_plan(setting.graph, request, setting.order, setting.costs, "q",
                          time_limit=1.0)
    assert again is not None and again.layouts["cpu"].method != "known"
    # and its layout is kept in place of the damaged one
    assert json.loads(path.read_text())["layout"]["arena"] == again.plan.devices[0].arena_bytes
