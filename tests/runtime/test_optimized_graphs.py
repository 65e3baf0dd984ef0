"""Plans of the graph ONNX Runtime would run (issue 16): planned, validated, run and checked.

mlp_sgd's extended rewrite holds ONNX Runtime's FusedGemm and our fused SGD updates (GPT-2's
FusedMatMul); cnn_bn_momentum's
basic rewrite folds a momentum update into a Gemm (the state is carried over by name). Each plan
runs in its arena and `arenaplan run --check` compares it with ONNX Runtime's default session on
the model as sent, within the stated tolerance; a plan whose optimized graph this ONNX Runtime
does not rebuild is refused, by the runtime and by the planner.
"""

from __future__ import annotations

import hashlib
import json
from functools import cache

import pytest

from arenaplan.cli import main
from planner.errors import OptimizedGraphError
from planner.ir.graph import load_graph, load_plan_graph
from planner.pipeline import plan_graph, plan_model
from planner.plan.validate import validate_plan
from planner.profile import QUICK_POLICY, profile_graph
from planner.version import PLANNER_VERSION
from runtime.errors import ModelMismatchError
from runtime.executor import PlanExecutor
from runtime.model import read_model
from runtime.reference import OPTIMIZED_TOLERANCE
from schemas.plan import Plan, PlanRequest, compute_plan_id
from tests.support.fixture_zoo import inputs_path, model_path

GENEROUS = 2**40
CASES = [("mlp_sgd", "extended"), ("cnn_bn_momentum", "basic"), ("gpt2_tiny_adam", "extended")]


@cache
def optimized_plan(name: str, level: str) -> Plan:
    return plan_model(model_path(name), PlanRequest(budgets={"cpu": GENEROUS}, time_limit_s=1,
                                                    graph_optimization=level))


@cache
def plain_plan(name: str) -> Plan:
    return plan_model(model_path(name), PlanRequest(budgets={"cpu": GENEROUS}, time_limit_s=1))


@pytest.mark.parametrize("name, level", CASES)
def test_the_plan_names_the_model_sent_and_the_graph_it_was_made_for(name, level):
    plan = optimized_plan(name, level)
    sha = hashlib.sha256(model_path(name).read_bytes()).hexdigest()
    assert plan.model_sha256 == sha
    assert plan.plan_id == compute_plan_id(sha, plan.request, PLANNER_VERSION)
    recorded = plan.optimized_graph
    assert recorded is not None and recorded.level == level
    assert recorded.providers == ["CPUExecutionProvider"] and recorded.sha256 != sha
    graph = load_plan_graph(model_path(name), plan)
    assert validate_plan(graph, plan).ok
    assert len(graph.ops) < len(load_graph(model_path(name)).ops)
    # the training state survives under the same names
    assert plan.state_updates == plain_plan(name).state_updates


def test_extended_plans_onnxruntime_fused_ops():
    ops = {name: {s.op_type for s in optimized_plan(name, "extended").steps
                  if s.kind == "compute"} for name in ("mlp_sgd", "gpt2_tiny_adam")}
    assert "FusedGemm" in ops["mlp_sgd"] and "FusedMatMul" in ops["gpt2_tiny_adam"]


def test_sgd_updates_are_fused_gemms_written_over_their_weights():
    """schemas.update_fusion: each of mlp_sgd's three weight gradients (a FusedMatMul carrying
    the learning rate, then a Sub) is one Gemm accumulating into the weight's own bytes."""
    plan = optimized_plan("mlp_sgd", "extended")
    buffers = {b.id: b for b in plan.buffers}
    fused = [s for s in plan.steps
             if s.kind == "compute" and s.op_name.endswith("/SgdUpdateFusion")]
    written = {buffers[s.outputs[0]].tensor: buffers[s.outputs[0]] for s in fused}
    assert set(written) == {f"fc{k}.weight.updated" for k in (1, 2, 3)}
    for s in fused:
        weight = buffers[s.inputs[2]]
        assert s.op_type == "Gemm" and weight.tensor + ".updated" in written
        assert written[weight.tensor + ".updated"].shares == "in_place"
        assert written[weight.tensor + ".updated"].storage == weight.storage


@pytest.mark.parametrize("name, level", CASES)
def test_run_check_is_within_tolerance_of_onnxruntime_default(name, level, tmp_path, capsys):
    path = tmp_path / "plan.json"
    path.write_text(optimized_plan(name, level).model_dump_json())
    code = main(["run", str(model_path(name)), "--plan", str(path), "--steps", "3",
                 "--inputs", str(inputs_path(name)), "--check", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0
    assert report["tolerance"] == OPTIMIZED_TOLERANCE
    assert report["check_ok"] and report["max_abs_diff"] <= OPTIMIZED_TOLERANCE
    losses = [row["loss"] for row in report["steps"]]
    assert len(set(losses)) > 1  # trained: state fed back through the optimized graph


def test_the_plain_plan_stays_bit_identical(tmp_path, capsys):
    path = tmp_path / "plan.json"
    path.write_text(plain_plan("mlp_sgd").model_dump_json())
    code = main(["run", str(model_path("mlp_sgd")), "--plan", str(path), "--steps", "3",
                 "--check", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["max_abs_diff"] == 0 and report["tolerance"] == 1e-5


def _with_other_digest(plan: Plan) -> Plan:
    assert plan.optimized_graph is not None
    other = plan.optimized_graph.model_copy(update={"sha256": "0" * 64})
    return plan.model_copy(update={"optimized_graph": other})


def test_a_digest_mismatch_is_refused_by_the_runtime(tmp_path, capsys):
    plan = _with_other_digest(optimized_plan("mlp_sgd", "extended"))
    with pytest.raises(ModelMismatchError, match="rewrites it into another graph"):
        PlanExecutor(read_model(model_path("mlp_sgd")), plan)
    path = tmp_path / "plan.json"
    path.write_text(plan.model_dump_json())
    assert main(["run", str(model_path("mlp_sgd")), "--plan", str(path)]) == 2
    assert "plan again with this ONNX Runtime and arenaplan" in capsys.readouterr().err


def test_a_digest_mismatch_is_refused_by_the_planner():
    plan = _with_other_digest(optimized_plan("mlp_sgd", "extended"))
    with pytest.raises(OptimizedGraphError, match="another graph"):
        load_plan_graph(model_path("mlp_sgd"), plan)


def test_the_validator_refuses_the_model_graph_for_an_optimized_plan():
    report = validate_plan(load_graph(model_path("mlp_sgd")), optimized_plan("mlp_sgd",
                                                                              "extended"))
    assert not report.ok and "load_plan_graph" in report.errors[0]


def test_the_fused_ops_are_profiled_on_the_cpu():
    graph = load_graph(model_path("mlp_sgd"), optimization="extended")
    profile = profile_graph(graph, ["cpu"], cache=None, policy=QUICK_POLICY)
    fused = [p for p in profile.ops if p.op_type == "FusedGemm" or
             p.name.endswith("/SgdUpdateFusion")]
    assert len(fused) == 5
    assert all(p.costs["cpu"].source == "measured" for p in fused)


def test_a_plan_under_budget_pressure_runs_within_tolerance(tmp_path, capsys):
    """cnn_bn_momentum's basic rewrite at 95% of its keep-everything arena: recomputation
    planned on the optimized graph's costs. (80%, then 85% was the figure until ordering's
    floor, exporter-order ties and the late recomputation of BatchNorm outputs
    (schemas.late_recompute) shrank that arena to 255,680 B; the planner meets 239,232 B.) The
    arena is that of the graph with the late copies, which a budget below the keep-everything
    arena of the graph without them gets."""
    graph = load_graph(model_path("cnn_bn_momentum"), optimization="basic")
    full = plan_graph(graph, PlanRequest(budgets={"cpu": GENEROUS}, time_limit_s=1,
                                         graph_optimization="basic")).devices[0].arena_bytes
    plan = plan_model(model_path("cnn_bn_momentum"), PlanRequest(
        budgets={"cpu": int(full * 0.95)}, time_limit_s=5, graph_optimization="basic"))
    assert any(s.kind == "compute" and s.recompute for s in plan.steps)
    path = tmp_path / "plan.json"
    path.write_text(plan.model_dump_json())
    code = main(["run", str(model_path("cnn_bn_momentum")), "--plan", str(path), "--steps", "2",
                 "--check", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["check_ok"]
