"""Ops whose output may share an input's storage are timed that way too, and priced so.

A kernel writing over the input it shares skips copying it (a view, a scatter's data) and writes
lines it has just read: in a plan that shares the storage the op costs its in-place time
(planner.profile.costs.CostTable), and every lower bound uses the least of the two times.
"""

from __future__ import annotations

import sqlite3

import numpy as np
from onnx import TensorProto, helper

from planner.ir.graph import load_graph
from planner.memory.schedule import sequential_schedule
from planner.memory.simulate import simulate
from planner.profile import QUICK_POLICY, profile_graph
from planner.profile.cache import CachedCost, CacheKey, ProfileCache
from planner.profile.costs import costs_from_profile
from planner.remat.bounds import crossing_bound
from tests.support.onnx_builders import make_model, value

BIG = [1024, 1024]  # 4 MiB of float32: far past the in-place threshold and the caches
SMALL = [64, 64]  # 16 KiB: below it


def _graph():
    """s = x * y (in place over x or y), r = Reshape(s) (a view), z = ScatterND(r, i, u) over
    its data; and a small Mul that is not timed in place."""
    nodes = [
        helper.make_node("Mul", ["x", "y"], ["s"]),
        helper.make_node("Reshape", ["s", "flat"], ["r"]),
        helper.make_node("ScatterND", ["r", "idx", "upd"], ["z"]),
        helper.make_node("Mul", ["a", "a"], ["b"]),
    ]
    flat = helper.make_tensor("flat", TensorProto.INT64, [1], [BIG[0] * BIG[1]])
    model = make_model(
        nodes,
        [value("x", BIG), value("y", BIG), value("idx", [4, 1], TensorProto.INT64),
         value("upd", [4]), value("a", SMALL)],
        [value("z", [BIG[0] * BIG[1]]), value("b", SMALL)],
        initializers=[flat],
    )
    inputs = {"x": np.random.default_rng(0).random(BIG, dtype=np.float32),
              "y": np.random.default_rng(1).random(BIG, dtype=np.float32),
              "idx": np.array([[0], [5], [9], [100]], np.int64),
              "upd": np.ones(4, np.float32), "a": np.ones(SMALL, np.float32)}
    return load_graph(model), inputs


def test_views_and_in_place_ops_are_timed_over_their_input():
    graph, inputs = _graph()
    profile = profile_graph(graph, inputs=inputs, cache=None, policy=QUICK_POLICY)
    cost = {o.op_type + str(o.op_id): o.costs["cpu"] for o in profile.ops}
    mul, reshape, scatter, small = (cost[k] for k in ("Mul0", "Reshape1", "ScatterND2", "Mul3"))
    # A view at its input's address copies nothing; out of place it copies 4 MiB.
    assert reshape.in_place_seconds is not None
    assert reshape.in_place_seconds < 0.25 * reshape.median_seconds, reshape
    # The scatter over its data writes four elements instead of copying 4 MiB first.
    assert scatter.in_place_seconds is not None
    assert scatter.in_place_seconds < 0.25 * scatter.median_seconds, scatter
    # Timed over its input (restored before each run, so no drift into denormals): same order.
    assert mul.in_place_seconds is not None
    assert 0.2 * mul.median_seconds < mul.in_place_seconds < 2 * mul.median_seconds, mul
    assert small.in_place_seconds is None


def test_a_replayed_schedule_pays_the_in_place_time_where_it_shares_storage():
    graph, inputs = _graph()
    profile = profile_graph(graph, inputs=inputs, cache=None, policy=QUICK_POLICY)
    costs = costs_from_profile(profile, graph, ["cpu"])
    order = list(range(len(graph.ops)))
    stats = simulate(graph, sequential_schedule(graph, order, "cpu"), costs)
    # x and y are graph inputs (they must survive): the Mul runs out of place; the Reshape is a
    # view of s and the scatter writes over r, which no one reads later.
    expected = sum(costs.run_seconds(op, "cpu", shared=op in (1, 2)) for op in order)
    assert stats.seconds == expected
    out_of_place = costs.sequential_seconds("cpu")
    assert out_of_place is not None and stats.seconds < out_of_place
    # Every bound holds for either time: each op once at its least.
    least = sum(costs.least_seconds(op, "cpu") for op in order)
    assert costs.fastest_seconds() == least
    assert crossing_bound(graph, order, "cpu", 10**12, costs).seconds == least


def test_the_cache_keeps_the_in_place_time_and_upgrades_an_older_file(tmp_path):
    path = tmp_path / "cache.sqlite"
    with sqlite3.connect(path) as db:  # the table as the first release made it
        db.execute("CREATE TABLE op_cost (key TEXT PRIMARY KEY, op_type TEXT NOT NULL, "
                   "provider TEXT NOT NULL, threads INTEGER NOT NULL, ort_version TEXT NOT NULL, "
                   "machine TEXT NOT NULL, signature TEXT NOT NULL, supported INTEGER NOT NULL, "
                   "median_s REAL, spread_s REAL, repeats INTEGER, workspace_bytes INTEGER, "
                   "reason TEXT, created REAL NOT NULL)")
    key = CacheKey("sig", "Mul", "CPUExecutionProvider", 1, "1.0", "m", "thread-cpu")
    with ProfileCache(path) as cache:
        cache.put(key, CachedCost(True, 2e-3, 1e-4, 10, 0, "", in_place_s=1e-3))
        cache.put(CacheKey("other", "Mul", "CPUExecutionProvider", 1, "1.0", "m", "thread-cpu"),
                  CachedCost(True, 1e-6, 0.0, 10))
        assert cache.get(key) == CachedCost(True, 2e-3, 1e-4, 10, 0, "", 1e-3)
    with ProfileCache(path) as cache:  # reopened: nothing to add, nothing lost
        assert cache.get(key) == CachedCost(True, 2e-3, 1e-4, 10, 0, "", 1e-3)


def test_a_plan_predicts_its_shared_runs_at_their_in_place_time():
    from planner.pipeline import plan_graph
    from schemas.plan import ComputeStep, PlanRequest

    graph, inputs = _graph()
    profile = profile_graph(graph, inputs=inputs, cache=None, policy=QUICK_POLICY)
    plan = plan_graph(graph, PlanRequest(budgets={"cpu": 2**30}, profile=profile,
                                         time_limit_s=10))
    buffers = {b.id: b for b in plan.buffers}
    costs = costs_from_profile(profile, graph, ["cpu"])
    steps = [s for s in plan.steps if isinstance(s, ComputeStep)]
    shared = {s.op_id for s in steps if buffers[s.outputs[0]].shares is not None}
    assert shared == {1, 2}  # the view and the scatter
    assert plan.predicted_seconds == sum(costs.run_seconds(s.op_id, "cpu", s.op_id in shared)
                                         for s in steps)
