"""Kernel workspace of a plan made without a profile (issue 16 item 2): one whole-graph ONNX
Runtime session measures every op's scratch (planner.profile.graph_workspace).

- Its per-op figures bound the per-op profile's (a real profile, its single-node sessions) and
  its largest figure equals the profile's largest: the same kernels, measured in context.
- A profile-less keep-everything plan of a convolutional fixture reserves that scratch and says
  in its notes how it was obtained (before: 0 reserved, nothing said).
- A measurement is kept in the profile cache and a second plan of the same graph takes it from
  there (GPT-2-small's takes 16 s and gigabytes); another thread count is measured again.
- A measurement whose estimated cost does not fit the time given is not started, and runs
  stop when the time is spent; a GPU this machine cannot run, or a graph with no ONNX model
  behind it (node-link JSON), is named in the plan's notes, not raised.
- A profile-less plan whose share of the time limit cannot pay for the measurement keeps its
  limit and reserves the conservative shape bound (planner.profile.workspace_bound), saying so:
  before, it waited for inputs it could not use and reserved 0 B (GPT-2-small, `--time-limit
  5`: 8.9 s).
"""

from __future__ import annotations

import random
import time
from functools import cache

import numpy as np
import pytest
from onnx import TensorProto, helper

from planner.ir.graph import load_graph
from planner.ir.graph_json import graph_from_node_link
from planner.pipeline import plan_graph, plan_model
from planner.profile import QUICK_POLICY, profile_graph
from planner.profile.devices import Device, create_session, cuda_really_available
from planner.profile.graph_workspace import (
    RUNS,
    _bound,
    _run,
    available_host_bytes,
    graph_workspaces,
    measure_graph_workspace,
    node_ops,
)
from planner.profile.graph_workspace_cost import measurement_cost
from planner.profile.inputs import graph_input_values
from schemas.plan import PlanRequest
from tests.support.chains import chain_json
from tests.support.fixture_zoo import inputs_path, model_path
from tests.support.onnx_builders import make_model, value

NAME = "cnn_bn_momentum"
pytestmark = pytest.mark.usefixtures("private_profile_cache")


@cache
def graph(name: str):
    return load_graph(model_path(name))


def test_whole_graph_figures_bound_the_per_op_profile_and_share_its_largest():
    g = graph(NAME)
    profile = profile_graph(g, inputs=dict(np.load(inputs_path(NAME))), cache=None,
                            policy=QUICK_POLICY)
    per_op = {o.op_id: o.costs["cpu"].workspace_bytes for o in profile.ops}
    found = measure_graph_workspace(g, Device("cpu"))
    assert found.measured and not found.loose
    assert set(found.scratch) == set(per_op)  # every op's kernel event read, mapped to its op
    assert all(found.scratch[op] >= per_op[op] for op in per_op)
    assert found.largest == max(per_op.values()) > 0  # measured: 131,072 B (a Where)


def test_nodes_map_to_the_ops_of_their_outputs():
    g = graph("gpt2_tiny_adam")
    ops = node_ops(g)
    assert sorted(op for op in ops if op is not None) == list(range(len(g.ops)))
    for node, op in zip(g.proto.graph.node, ops, strict=True):
        assert op is not None and g.ops[op].op_type == node.op_type


@pytest.mark.parametrize("name", ["cnn_bn_momentum", "unet_small"])
def test_a_plan_without_a_profile_reserves_the_measured_scratch(name):
    plan = plan_model(model_path(name), PlanRequest(budgets={"cpu": 2**40}, time_limit_s=5))
    assert plan.request.profile is None
    (device,) = plan.devices
    largest = measure_graph_workspace(graph(name), Device("cpu")).largest
    assert device.workspace_bytes == largest > 0  # every output kept: the largest op scratch
    notes = [n for report in plan.solvers for n in report.notes if n.startswith("workspace:")]
    assert len(notes) == 1 and "whole-graph ONNX Runtime session on cpu" in notes[0]


def test_a_measurement_is_kept_in_the_profile_cache(tmp_path, monkeypatch):
    """The second request for the same graph, device and threads reads the first one's figures;
    one with another thread count measures again."""
    monkeypatch.setenv("ARENAPLAN_CACHE_DIR", str(tmp_path))  # empty: the first one measures
    unet = load_graph(model_path("unet_small"))
    first = graph_workspaces(unet, ["cpu"])["cpu"]
    again = graph_workspaces(unet, ["cpu"])["cpu"]
    assert first.measured and not first.cached
    assert again.cached and again.scratch == first.scratch and again.loose == first.loose
    assert not graph_workspaces(unet, ["cpu"], threads=2)["cpu"].cached


def test_a_measurement_that_cannot_fit_its_time_is_not_started():
    found = measure_graph_workspace(graph(NAME), Device("cpu"), time_limit_s=0)
    assert not found.measured and found.scratch == {}
    assert found.reason.startswith("estimated to take") and "0.0 s left" in found.reason


def test_runs_stop_when_no_time_is_left():
    g = graph(NAME)
    session = create_session(g.proto, Device("cpu"), 1)
    with pytest.raises(Exception, match="terminate"):
        _run(_bound(session, g, Device("cpu"), graph_input_values(g)), 0)


def slow_matmul_where(n: int = 4096):
    """z = Where(c, x @ w, x): one 137-GFLOP MatMul (estimated at 7 s a run on one thread) and a
    Where, the one op here that may take scratch on the CPU (twice its 64 MiB operands)."""
    f = TensorProto.FLOAT
    return make_model(
        [helper.make_node("MatMul", ["x", "w"], ["y"]),
         helper.make_node("Where", ["c", "y", "x"], ["z"])],
        [value("x", [n, n]), value("w", [n, n]), value("c", [n, n], TensorProto.BOOL)],
        [value("z", [n, n], f)])


def test_a_short_limit_keeps_its_clock_and_reserves_the_stated_bound():
    limit = 2.0
    model = slow_matmul_where()
    assert measurement_cost(load_graph(model)).total(RUNS) > 5 * limit  # could never fit
    started = time.perf_counter()
    plan = plan_model(model, PlanRequest(budgets={"cpu": 2**40}, time_limit_s=limit))
    assert time.perf_counter() - started <= limit * 1.05 + 1  # issue 14 item 4
    assert plan.request.profile is None
    assert plan.devices[0].workspace_bytes == 2 * 4096 * 4096 * 4  # the Where's bound
    (note,) = [n for report in plan.solvers for n in report.notes if n.startswith("workspace:")]
    assert "not measured (estimated to take" in note and "conservative bound" in note


@pytest.mark.skipif(available_host_bytes() is None, reason="no MemAvailable on this OS")
def test_a_session_the_host_memory_cannot_hold_is_not_started():
    found = measure_graph_workspace(graph(NAME), Device("cpu"), live_bytes=1 << 60)
    assert not found.measured and "host memory" in found.reason


def test_a_graph_without_a_model_plans_with_no_workspace_and_says_why():
    chain, _ = graph_from_node_link(chain_json(random.Random(0), 50))
    plan = plan_graph(chain, PlanRequest(budgets={"cpu": 2**40}, time_limit_s=5))
    assert plan.devices[0].workspace_bytes == 0
    assert any("not measured (no ONNX model" in n for r in plan.solvers for n in r.notes)


@pytest.mark.skipif(cuda_really_available(), reason="a usable GPU: tested by the cuda test")
def test_a_gpu_this_machine_lacks_is_named_not_raised():
    found = measure_graph_workspace(graph(NAME), Device("cuda", 0))
    assert not found.measured and "cuda:0" in found.reason


@pytest.mark.cuda
@pytest.mark.skipif(not cuda_really_available(), reason="no usable CUDA device")
def test_cuda_whole_graph_scratch_is_measured_on_the_gpu():
    found = measure_graph_workspace(graph(NAME), Device("cuda", 0))
    assert found.measured and found.largest > 0
    plan = plan_model(model_path(NAME), PlanRequest(budgets={"cuda:0": 2**40}, time_limit_s=5))
    assert plan.devices[0].workspace_bytes >= found.largest
