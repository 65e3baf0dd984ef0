"""Every fixture's plan at 100% budget runs in its arena and equals ONNX Runtime, step by step.

`arenaplan run --check --steps 5` compares every output of every step with one whole-graph ONNX
Runtime session fed the same inputs (state fed back on both sides, in place where the plan
updates state in place); every output of the 5 steps must be bit-identical to the reference's,
and the fixture's recorded reference loss is step 1's.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from arenaplan.cli import main
from runtime.executor import ExecutorOptions, PlanExecutor
from runtime.inputs import read_npz
from runtime.model import read_model
from runtime.reference import ReferenceSession, compare_outputs
from tests.support.fixture_zoo import REQUIRED, inputs_path, model_path, sidecar
from tests.support.runtime_plans import full_budget_plan

STEPS = 5


def run_cli_json(capsys, *argv: str) -> tuple[int, dict]:
    code = main(["run", *argv, "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out) if out.strip().startswith("{") else {}


@pytest.mark.parametrize("name", REQUIRED)
def test_run_check_matches_onnxruntime_for_five_steps(name, tmp_path, capsys):
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(full_budget_plan(name).model_dump_json())
    code, report = run_cli_json(
        capsys, str(model_path(name)), "--plan", str(plan_file), "--steps", str(STEPS),
        "--inputs", str(inputs_path(name)), "--check",
    )
    assert code == 0
    assert report["check_ok"] and report["max_abs_diff"] == 0  # bit-identical
    steps = report["steps"]
    assert len(steps) == STEPS
    assert report["loss_output"] == sidecar(name)["loss_output"]
    for row in steps:
        assert row["loss"] == row["reference_loss"]
    assert steps[0]["loss"] == pytest.approx(sidecar(name)["reference_loss"], rel=1e-4, abs=1e-5)
    losses = [row["loss"] for row in steps]
    assert len(set(losses)) > 1, "state must be fed back: the loss changes from step to step"
    assert report["arena_bytes"] == {"cpu": full_budget_plan(name).devices[0].arena_bytes}


@pytest.mark.parametrize("name", ["cnn_bn_momentum", "gpt2_tiny_adam"])
@pytest.mark.parametrize("options", [
    ExecutorOptions(fuse=False),  # one session per op
    ExecutorOptions(optimization="basic"),  # segments grouped without relying on node order
    ExecutorOptions(max_segment=7),  # many short segments
], ids=["per-op", "order-free-segments", "short-segments"])
def test_other_execution_modes_match_too(name, options):
    model = read_model(model_path(name))
    plan = full_budget_plan(name)
    executor = PlanExecutor(model, plan, options=options)
    reference = ReferenceSession(model, plan.state_updates)
    values = read_npz(inputs_path(name), model)
    executor.load_inputs(values)
    reference.load_inputs(values)
    if options.fuse:
        assert executor.segment_count > 1
    else:
        assert executor.segment_count == len(model.nodes)
    for _ in range(3):
        executor.step()
        reference.step()
        diffs = compare_outputs(executor.outputs(), reference.last)
        assert max(diffs.values()) == 0, max(diffs, key=diffs.get)


def test_run_prints_losses_times_and_arenas(tmp_path, capsys):
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(full_budget_plan("mlp_sgd").model_dump_json())
    code = main(["run", str(model_path("mlp_sgd")), "--plan", str(plan_file), "--steps", "3",
                 "--check"])
    out = capsys.readouterr().out
    assert code == 0
    assert out.count("loss ") == 3 and "step 3/3" in out
    assert "cpu: arena" in out and "max abs diff" in out and "check ok" in out
    assert "peak RSS growth" in out


def test_generated_inputs_run_and_match(tmp_path, capsys):
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(full_budget_plan("gpt2_tiny_adam").model_dump_json())
    code, report = run_cli_json(capsys, str(model_path("gpt2_tiny_adam")), "--plan",
                                str(plan_file), "--steps", "2", "--check")
    assert code == 0 and report["check_ok"]
    assert all(np.isfinite(row["loss"]) for row in report["steps"])


def test_a_failed_check_exits_1(tmp_path, capsys):
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(full_budget_plan("mlp_sgd").model_dump_json())
    # a negative tolerance cannot be met even by identical results
    code, report = run_cli_json(capsys, str(model_path("mlp_sgd")), "--plan", str(plan_file),
                                "--check", "--tolerance", "-1")
    assert code == 1 and report["check_ok"] is False


def test_new_data_each_step_and_restarting_from_given_state():
    name = "cnn_bn_momentum"
    model = read_model(model_path(name))
    plan = full_budget_plan(name)
    executor = PlanExecutor(model, plan)
    reference = ReferenceSession(model, plan.state_updates)
    values = read_npz(inputs_path(name), model)
    executor.load_inputs(values)
    reference.load_inputs(values)
    data_names = [n for n in plan.graph_inputs if n not in plan.state_updates]
    rng = np.random.default_rng(0)
    for _ in range(3):
        batch = {n: values[n] for n in data_names}
        batch["input"] = rng.standard_normal(values["input"].shape).astype(np.float32)
        executor.step(batch)
        reference.step(batch)
        assert max(compare_outputs(executor.outputs(), reference.last).values()) == 0
    # loading state again restarts training from it: step 1's loss comes back
    executor.load_inputs(values)
    executor.step()
    fresh = ReferenceSession(model, plan.state_updates)
    fresh.load_inputs(values)
    fresh.step()
    loss = sidecar(name)["loss_output"]
    assert executor.output(loss) == fresh.last[loss]
