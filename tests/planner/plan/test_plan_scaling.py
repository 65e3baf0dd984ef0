"""Building and validating a plan stay linear in the graph, and the validator still catches an
in-place write over a value that must survive.

The 20,000-op chain once spent 2.6 s of a 2 s limit in planner.plan. Growth is measured by the
lines of planner.plan that run (sys.settrace), which no machine load changes: a step that scans
a whole storage for every write into it shows up as a line count growing with the square of the
graph. The wall-clock check on the chain itself is in the scale suite (`make test-scale`).
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from onnx import helper

import planner.plan
import planner.plan.builder
from planner.ir.graph import Graph, load_graph
from planner.ir.graph_json import graph_from_node_link
from planner.layout import plan_layout
from planner.memory.schedule import sequential_schedule
from planner.plan.builder import build_plan
from planner.plan.validate import validate_plan
from schemas.plan import Plan, PlanRequest
from tests.support.chains import chain_json
from tests.support.onnx_builders import make_model, value

PLAN_DIR = str(Path(planner.plan.__file__).parent)
# Lines run for 4x the ops, over lines run for 1x: 4 when linear, 16 when quadratic.
LINEAR_GROWTH = 5.0
PER_OP_S = 250e-6


def _in_place_chain(n: int) -> Graph:
    """x -> Exp -> n Negs -> ReduceSum: the Negs all run in place, in the storage of Exp's
    output (x is a data input and keeps its bytes)."""
    nodes = [helper.make_node("Exp", ["x"], ["t0"])]
    nodes += [helper.make_node("Neg", [f"t{i}"], [f"t{i + 1}"]) for i in range(n)]
    nodes.append(helper.make_node("ReduceSum", [f"t{n}"], ["loss"], keepdims=0))
    return load_graph(make_model(nodes, [value("x", [16])], [value("loss", [])]))


def _plan(graph: Graph) -> Plan:
    request = PlanRequest(budgets={"cpu": 1 << 30}, alignment=64, time_limit_s=5)
    schedule = sequential_schedule(graph, range(len(graph.ops)), "cpu")
    return build_plan(graph, schedule, request, plan_id="t", planner_version="t").plan


def _lines_run_in_planner_plan(work: Callable[[], object]) -> int:
    count = 0

    def local(frame, event, arg):
        nonlocal count
        count += event == "line"
        return local

    def calls(frame, event, arg):
        return local if frame.f_code.co_filename.startswith(PLAN_DIR) else None

    before = sys.gettrace()
    sys.settrace(calls)
    try:
        work()
    finally:
        sys.settrace(before)
    return count


def test_the_in_place_chain_validates_in_one_storage():
    graph = _in_place_chain(50)
    plan = _plan(graph)
    assert validate_plan(graph, plan).ok
    assert len({b.storage for b in plan.buffers if b.tensor.startswith("t")}) == 1


@pytest.mark.parametrize("phase", ["build", "validate"])
def test_building_and_validating_grow_linearly_with_the_chain(phase):
    lines = []
    for n in (250, 1000):
        graph = _in_place_chain(n)
        if phase == "build":
            lines.append(_lines_run_in_planner_plan(lambda g=graph: _plan(g)))
        else:
            plan = _plan(graph)
            lines.append(_lines_run_in_planner_plan(lambda g=graph, p=plan: validate_plan(g, p)))
    assert lines[1] <= LINEAR_GROWTH * lines[0], lines


def test_a_write_at_step_0_over_a_data_input_is_rejected():
    """Exp writing its output over x in place: x is preloaded before step 0, and a data input
    must keep its value (no later write into the storage: step 0's alone must be caught)."""
    graph = _in_place_chain(0)
    plan = _plan(graph)
    buffers = [b.model_copy() for b in plan.buffers]
    x = next(b for b in buffers if b.tensor == "x")
    t0 = next(b for b in buffers if b.tensor == "t0")
    for moved in [b for b in buffers if b.storage == t0.id]:
        moved.storage, moved.offset = x.id, x.offset
        moved.shares = "in_place"
    errors = validate_plan(graph, plan.model_copy(update={"buffers": buffers})).errors
    assert any("over x@cpu, which must keep its value" in e for e in errors), errors


@pytest.mark.scale
def test_the_20000_op_chain_builds_and_validates_in_about_linear_time(monkeypatch):
    """Generous, for shared machines: PER_OP_S for building (the layout's own time left out)
    and for validating, each (30-70 us on the development machine's two shared cores; a scan
    per op over the graph would take seconds per op)."""
    graph, _ = graph_from_node_link(chain_json(random.Random(0), 10_000))
    request = PlanRequest(budgets={"cpu": 1 << 40}, alignment=1, time_limit_s=5)
    schedule = sequential_schedule(graph, range(len(graph.ops)), "cpu")
    laying_out = 0.0

    def timed_layout(*args, **kwargs):
        nonlocal laying_out
        started = time.perf_counter()
        try:
            return plan_layout(*args, **kwargs)
        finally:
            laying_out += time.perf_counter() - started

    monkeypatch.setattr(planner.plan.builder, "plan_layout", timed_layout)
    started = time.perf_counter()
    built = build_plan(graph, schedule, request, plan_id="t", planner_version="t",
                       layout_time_limit=1.0)
    building = time.perf_counter() - started - laying_out
    started = time.perf_counter()
    report = validate_plan(graph, built.plan)
    validating = time.perf_counter() - started
    assert report.ok, report.errors[:3]
    assert building <= PER_OP_S * len(graph.ops), building
    assert validating <= PER_OP_S * len(graph.ops), validating
