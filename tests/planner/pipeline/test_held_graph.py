"""The graph planned for a budget: with schemas.late_recompute's copies only when the budget needs
them. A budget that holds the keep-everything plan of the graph without the copies gets that
plan (the copies would cost time and save bytes nobody asked for); a byte less gets the graph
with the copies. Both plans are rebuilt by the runtime from their record and run bit-identical
to ONNX Runtime. A request carrying a profile (made for the graph with the copies) gets the same
choice, the graph without them priced by that profile's costs of its ops."""

from __future__ import annotations

import json
from functools import cache

from arenaplan.cli import main
from planner.ir.graph import load_graph, load_plan_graph
from planner.pipeline import plan_model
from planner.plan.validate import validate_plan
from planner.profile import QUICK_POLICY, profile_graph
from planner.profile.for_request import carried_over
from schemas.optimized_graph import OptimizedGraph
from schemas.plan import Plan, PlanRequest
from schemas.profile import Profile
from tests.support.fixture_zoo import inputs_path, model_path

MODEL = "gpt2_tiny_adam"


def planned(budget: int, profile: Profile | None = None) -> Plan:
    return plan_model(model_path(MODEL), PlanRequest(budgets={"cpu": budget}, time_limit_s=5,
                                                     graph_optimization="extended",
                                                     profile=profile))


@cache
def plan_at(budget: int) -> Plan:
    return planned(budget)


@cache
def profile_with_copies() -> Profile:
    """A profile of the graph the CLI plans (with the copies), as `arenaplan profile` makes."""
    graph = load_graph(model_path(MODEL), optimization="extended")
    return profile_graph(graph, ["cpu"], policy=QUICK_POLICY, cache=None)


def ample() -> Plan:
    return plan_at(2**40)


def tight() -> Plan:
    return plan_at(ample().devices[0].arena_bytes - 1)


def copies(plan: Plan) -> int:
    graph = load_plan_graph(model_path(MODEL), plan)
    assert validate_plan(graph, plan).ok
    return sum(op.name.endswith("/LateRecompute") for op in graph.ops)


def test_an_ample_budget_gets_the_graph_without_the_late_copies():
    plan = ample()
    assert plan.optimized_graph is not None and not plan.optimized_graph.late_recompute
    held = load_graph(model_path(MODEL), optimization="extended", late_recompute=False)
    assert held.optimized is not None and plan.optimized_graph.sha256 == held.optimized.sha256
    assert copies(plan) == 0


def test_a_byte_less_gets_the_graph_with_them():
    plan = tight()
    assert plan.optimized_graph is not None and plan.optimized_graph.late_recompute
    assert plan.devices[0].arena_bytes < ample().devices[0].arena_bytes
    assert copies(plan) > 0


def test_both_run_bit_identical_to_onnxruntime(tmp_path, capsys):
    for plan in (ample(), tight()):
        path = tmp_path / "plan.json"
        path.write_text(plan.model_dump_json())
        code = main(["run", str(model_path(MODEL)), "--plan", str(path), "--steps", "3",
                     "--inputs", str(inputs_path(MODEL)), "--check", "--json"])
        report = json.loads(capsys.readouterr().out)
        assert code == 0 and report["max_abs_diff"] == 0


def test_a_plan_recorded_before_the_choice_names_the_graph_with_the_copies():
    recorded = {"level": "extended", "providers": ["CPUExecutionProvider"],
                "onnxruntime_version": "1.31.1", "sha256": "0" * 64}
    assert OptimizedGraph.model_validate(recorded).late_recompute


def test_a_request_with_a_profile_gets_the_graph_without_the_copies_priced_by_it():
    profile = profile_with_copies()
    plan = planned(2**40, profile)
    assert plan.optimized_graph is not None and not plan.optimized_graph.late_recompute
    held = load_plan_graph(model_path(MODEL), plan)
    carried = carried_over(profile, held)
    assert carried is not None and len(carried.ops) == len(held.ops) < len(profile.ops)
    report = validate_plan(held, plan, carried)
    assert report.ok and report.predicted_seconds is not None
    assert plan.predicted_seconds == report.predicted_seconds


def test_a_profile_lacking_an_op_of_that_graph_plans_the_graph_with_the_copies():
    held = load_graph(model_path(MODEL), optimization="extended", late_recompute=False)
    profile = profile_with_copies()
    renamed = [entry.model_copy(update={"name": "elsewhere"}) if entry.name == held.ops[0].name
               else entry for entry in profile.ops]
    other = profile.model_copy(update={"ops": renamed})
    assert carried_over(other, held) is None
    retyped = [entry.model_copy(update={"op_type": "Identity"})
               if entry.name == held.ops[0].name else entry for entry in profile.ops]
    assert carried_over(profile.model_copy(update={"ops": retyped}), held) is None
    plan = planned(2**40, other)
    assert plan.optimized_graph is not None and plan.optimized_graph.late_recompute
