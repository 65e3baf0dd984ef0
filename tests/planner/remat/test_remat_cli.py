"""The remat commands end to end: plan exit codes, --graph-json, min-budget, max-batch."""

from __future__ import annotations

import json
import random
import time

import pytest

from arenaplan.cli import main
from planner.ir.graph import load_graph, load_plan_graph
from planner.ir.graph_json import read_graph_json
from planner.memory.liveness import order_lower_bound
from planner.plan.validate import validate_plan
from planner.queries import max_batch
from schemas.plan import Plan, PlanRequest
from tests.support.chains import chain_json
from tests.support.fixture_zoo import model_path
from tests.support.onnx_builders import tiny_momentum_step


@pytest.fixture(autouse=True)
def _private_profile_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ARENAPLAN_CACHE_DIR", str(tmp_path / "cache"))


def test_plan_exit_codes_and_the_smallest_feasible_budget(tmp_path, capsys):
    model = str(model_path("cnn_bn_momentum"))
    out = tmp_path / "plan.json"
    lower = order_lower_bound(load_graph(model, optimization="extended"))  # the CLI's graph
    code = main(["plan", model, "--budget", f"cpu={lower - 1}", "--time-limit", "5",
                 "-o", str(out)])
    assert code == 3
    assert str(lower) in capsys.readouterr().err
    assert main(["plan", model, "--budget", "gpu=1GiB", "-o", str(out)]) == 2
    assert main(["plan", "--budget", "cpu=1GiB", "-o", str(out)]) == 2
    assert main(["plan", model, "--graph-json", "g.json", "--budget", "cpu=1GiB", "-o",
                 str(out)]) == 2
    code = main(["plan", model, "--budget", "cpu=230KiB", "--time-limit", "10", "--workers",
                 "2", "-o", str(out)])
    assert code == 0
    plan = Plan.model_validate(json.loads(out.read_text()))
    assert {s.phase for s in plan.solvers} >= {"order", "remat", "layout"}
    assert validate_plan(load_plan_graph(model, plan), plan).ok


def test_plan_graph_json_writes_a_validated_plan(tmp_path, capsys):
    path = tmp_path / "chain.json"
    path.write_text(json.dumps(chain_json(random.Random(5), 6)))
    out = tmp_path / "plan.json"
    assert main(["plan", "--graph-json", str(path), "--budget", "cpu=40", "--alignment", "1",
                 "--time-limit", "5", "-o", str(out)]) == 0
    graph, profile = read_graph_json(path)
    plan = Plan.model_validate(json.loads(out.read_text()))
    report = validate_plan(graph, plan, profile)
    assert report.ok and max(report.live_bytes["cpu"]) <= 40
    assert "predicted step time" in capsys.readouterr().out
    path.write_text(json.dumps({"nodes": [{"id": 0, "cost_cpu": 1, "cost_ram": -3}]}))
    assert main(["plan", "--graph-json", str(path), "--budget", "cpu=40", "-o", str(out)]) == 2


def test_huge_costs_and_sizes_never_crash_the_solver(tmp_path, capsys):
    """Costs of ~1e13 s once ended in CP-SAT's 'Unable to cast Python instance' traceback:
    the time unit now grows with them, and the plan is validated with the user's costs; sizes
    past the solver's range are refused with exit 2, naming the alignment that fits."""
    data = chain_json(random.Random(1), 30)
    for node in data["nodes"]:
        if "cost_cpu" in node:
            node["cost_cpu"] *= 1e13
    path = tmp_path / "costly.json"
    path.write_text(json.dumps(data))
    out = tmp_path / "plan.json"
    assert main(["plan", "--graph-json", str(path), "--budget", "cpu=1600", "--time-limit", "5",
                 "-o", str(out)]) == 0
    graph, profile = read_graph_json(path)
    plan = Plan.model_validate(json.loads(out.read_text()))
    report = validate_plan(graph, plan, profile)
    assert report.ok and plan.devices[0].arena_bytes <= 1600
    remat = next(s for s in plan.solvers if s.phase == "remat")
    assert remat.bound <= remat.objective
    for node in data["nodes"]:
        node["cost_ram"] *= 10**15
    path.write_text(json.dumps(data))
    capsys.readouterr()
    budget = "cpu=60000000000000000"
    assert main(["plan", "--graph-json", str(path), "--budget", budget, "--time-limit", "5",
                 "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "--alignment 512 or more" in err
    assert main(["plan", "--graph-json", str(path), "--budget", budget, "--alignment", "512",
                 "--time-limit", "5", "-o", str(out)]) == 0


def test_min_budget_reports_lower_bound_and_achieved(capsys):
    model = str(model_path("mlp_sgd"))
    assert main(["min-budget", model, "--time-limit", "10", "--workers", "2", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["lower_bound_bytes"] <= result["achieved_bytes"]
    assert result["achieved_bytes"] <= result["keep_all_arena_bytes"]


def test_max_batch_doubles_then_bisects_on_a_symbolic_batch(tmp_path, capsys):
    model = tmp_path / "momentum.onnx"
    model.write_bytes(tiny_momentum_step(batch="batch").SerializeToString())
    args = ["max-batch", str(model), "--budget", "cpu=8KiB", "--time-limit", "30", "--json"]
    assert main(args) == 0
    found = json.loads(capsys.readouterr().out)
    assert found["complete"] is True
    best = found["max"]
    assert best >= 1 and found["tried"][str(best)] is True
    assert found["tried"].get(str(best + 1)) is False
    plan_args = ["plan", str(model), "--budget", "cpu=8KiB", "--time-limit", "4", "-o",
                 str(tmp_path / "p.json")]
    assert main([*plan_args, "--dim", f"batch={best}"]) == 0
    assert main([*plan_args, "--dim", f"batch={best + 1}"]) == 3
    assert main(["max-batch", str(model), "--budget", "cpu=8KiB", "--dim-name", "seq"]) == 2


def test_max_batch_stops_when_its_time_is_spent(tmp_path):
    """The time limit bounds the whole search: with it spent before the search starts, only
    the first value is planned, and the answer says the search is incomplete."""
    model = tmp_path / "momentum.onnx"
    model.write_bytes(tiny_momentum_step(batch="batch").SerializeToString())
    request = PlanRequest(budgets={"cpu": 8 << 10}, time_limit_s=4)
    result = max_batch(model, request, started=time.perf_counter() - 4)
    assert result.tried == {1: True} and result.value == 1 and not result.complete
    assert result.plan is not None
