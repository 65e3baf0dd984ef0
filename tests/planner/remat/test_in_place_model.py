"""The stage models count an output written over a value its op frees as the replay does: in
that value's bytes (planner.remat.problem's Node.in_place, constraints' in-place credit).

Counted as bytes of their own, in-place outputs made the model of GPT-2-tiny at its persistent
bytes plus half of its activations INFEASIBLE, so CP-SAT gave nothing but that verdict; credited,
the heuristics' schedules are its hints and it bounds them.
"""

from __future__ import annotations

import pytest
from onnx import helper

from planner.ir.graph import load_graph
from planner.memory.simulate import simulate
from planner.memory.zones import persistent_tensors
from planner.order import optimize_order
from planner.profile import QUICK_POLICY, profile_graph
from planner.profile.costs import costs_from_profile
from planner.profile.for_request import carried_over
from planner.remat import baselines
from planner.remat.decision import evaluate
from planner.remat.emit import emit_schedule
from planner.remat.policies import execute
from planner.remat.problem import RematOptions, build_problem
from planner.remat.rematerialize import plan_remat
from planner.remat.solve import solve_problem
from tests.planner.remat.test_remat_search import at_activation_share
from tests.support.fixture_zoo import model_path
from tests.support.onnx_builders import make_model, value

pytestmark = pytest.mark.usefixtures("private_profile_cache")
UNIT = 64


def activation_chain(late_reader: bool):
    """h = x @ W, then Relu, Sigmoid and a sum: each elementwise output may go over its input
    (an activation, 16 KiB); with `late_reader` an Add at the end reads h again, so the Relu
    cannot write over it."""
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]),
             helper.make_node("Relu", ["h"], ["a"]),
             helper.make_node("Sigmoid", ["a"], ["s"])]
    last = "s"
    if late_reader:
        nodes.append(helper.make_node("Add", ["s", "h"], ["sh"]))
        last = "sh"
    nodes.append(helper.make_node("ReduceSum", [last], ["loss"], keepdims=0))
    return make_model(nodes, [value("x", [64, 8]), value("W", [8, 64])], [value("loss", [])])


def problem_of(model):
    graph = load_graph(model)
    profile = profile_graph(graph, ["cpu"], policy=QUICK_POLICY, cache=None)
    costs = costs_from_profile(profile, graph, ["cpu"])
    order = range(len(graph.ops))
    return graph, costs, build_problem(graph, order, costs, devices=["cpu"], home="cpu",
                                       options=RematOptions(memory_unit=UNIT))


def replayed_and_modelled(graph, costs, problem) -> tuple[int, int]:
    keep = execute(problem, "cpu", "keep").decision
    assert keep is not None
    modelled = evaluate(problem, keep).peaks["cpu"] * UNIT
    replayed = simulate(graph, emit_schedule(problem, keep), costs, alignment=UNIT).peaks["cpu"]
    return replayed, modelled


def test_an_elementwise_op_freeing_its_input_is_counted_in_that_input():
    graph, costs, problem = problem_of(activation_chain(late_reader=False))
    by_type = {graph.ops[node.ops[0]].op_type: node for node in problem.nodes}
    assert by_type["Relu"].in_place and by_type["Sigmoid"].in_place
    assert not by_type["MatMul"].in_place  # x is a graph input: never written over
    replayed, modelled = replayed_and_modelled(graph, costs, problem)
    assert modelled == replayed  # one 16 KiB activation at a time, plus x and W
    solution = solve_problem(problem, {"cpu": replayed // UNIT}, time_limit=5)
    assert solution.status in ("OPTIMAL", "FEASIBLE")


def test_a_value_read_later_is_not_credited():
    graph, costs, problem = problem_of(activation_chain(late_reader=True))
    replayed, modelled = replayed_and_modelled(graph, costs, problem)
    assert modelled >= replayed
    solution = solve_problem(problem, {"cpu": replayed // UNIT - 1}, time_limit=5)
    assert solution.status == "INFEASIBLE"  # h and a (then s) live at once: no plan below


@pytest.mark.scale
def test_gpt2_tiny_at_half_its_activations_has_a_model_cpsat_can_use():
    """The budget of bench/remat/budgets.md's row: persistent bytes plus half of the rest of
    the keep-everything peak an ample budget gets (the graph without the late copies)."""
    graph, profile, costs, order, _ = at_activation_share("gpt2_tiny_adam")
    held = load_graph(model_path("gpt2_tiny_adam"), optimization="extended",
                      late_recompute=False)
    held_order = optimize_order(held, use_solver=False).order
    held_costs = costs_from_profile(carried_over(profile, held), held, ["cpu"])
    keep = baselines.keep_all(held, held_order, "cpu", held_costs,
                              alignment=UNIT).stats.peaks["cpu"]
    persistent = sum(-(-graph.tensors[t].nbytes // UNIT) * UNIT
                     for t in persistent_tensors(graph))
    budget = (persistent + keep) // 2
    result = plan_remat(graph, order, {"cpu": budget}, costs, time_limit=20, workers=2)
    assert result.best is not None and result.best.stats.fits({"cpu": budget})
    assert result.model.status in ("OPTIMAL", "FEASIBLE")
