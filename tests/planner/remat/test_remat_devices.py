"""Two devices on a CPU-only machine: a profile where 'cuda:0' is faster but small.

The profile is a real CPU measurement of mlp_sgd with a second device added by hand (every op
five times faster, copies at 20 GB/s). The planner must place most compute on the fast device,
copy what crosses, keep state, constants and outputs on the large host, and the validator must
accept the plan with both arenas within their budgets.
"""

from __future__ import annotations

import time

import pytest

from planner.errors import InfeasibleError, InvalidInputError
from planner.ir.graph import load_graph
from planner.order import optimize_order
from planner.pipeline import plan_graph
from planner.plan.validate import validate_plan
from planner.profile import QUICK_POLICY, profile_graph
from schemas.plan import ComputeStep, CopyStep, PlanRequest
from schemas.profile import CopyFit
from tests.support.fixture_zoo import model_path

SPEEDUP = 5.0


@pytest.fixture(scope="module")
def mlp():
    graph = load_graph(model_path("mlp_sgd"))
    measured = profile_graph(graph, ["cpu"], cache=None, policy=QUICK_POLICY)
    ops = []
    for op in measured.ops:
        cpu = op.costs["cpu"]
        fast = cpu.model_copy(update={"median_seconds": cpu.median_seconds / SPEEDUP,
                                      "source": "user"})
        ops.append(op.model_copy(update={"costs": {"cpu": cpu, "cuda:0": fast}}))
    copies = [CopyFit(src=a, dst=b, latency_seconds=1e-7, bytes_per_second=2e10,
                      method="test: assumed PCIe-like link")
              for a, b in (("cpu", "cuda:0"), ("cuda:0", "cpu"))]
    profile = measured.model_copy(update={"devices": ["cpu", "cuda:0"], "ops": ops,
                                          "copies": copies})
    return graph, measured, profile


def test_fast_small_gpu_gives_a_mixed_placement_with_copies(mlp):
    graph, measured, profile = mlp
    peak = optimize_order(graph, use_solver=False).peak_bytes
    budgets = {"cpu": 2 * peak, "cuda:0": peak // 2}
    plan = plan_graph(graph, PlanRequest(budgets=budgets, profile=profile, time_limit_s=15,
                                         workers=2))
    report = validate_plan(graph, plan, profile)
    assert report.ok, report.errors[:3]
    on = {}
    for step in plan.steps:
        if isinstance(step, ComputeStep):
            on[step.device] = on.get(step.device, 0) + 1
    assert on.get("cuda:0", 0) > 0 and on.get("cpu", 0) > 0
    assert any(isinstance(s, CopyStep) for s in plan.steps)
    for device in plan.devices:
        assert device.arena_bytes <= budgets[device.device]
    cpu_only = sum(op.costs["cpu"].median_seconds for op in measured.ops)
    assert report.predicted_seconds < cpu_only
    remat = next(s for s in plan.solvers if s.phase == "remat")
    assert remat.objective == pytest.approx(report.predicted_seconds)
    state = {b.tensor for b in plan.buffers if b.zone == "persistent"}
    assert all(b.device == "cpu" for b in plan.buffers if b.tensor in state and b.preloaded)


def test_gpu_budget_without_profile_or_gpu_says_to_pass_a_profile(mlp, monkeypatch, tmp_path):
    graph, _, _ = mlp
    monkeypatch.setenv("ARENAPLAN_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    request = PlanRequest(budgets={"cpu": 1 << 30, "cuda:0": 1 << 20}, time_limit_s=5)
    with pytest.raises(InvalidInputError, match="--profile"):
        plan_graph(graph, request)


@pytest.mark.slow  # 15-35 s: `make test` stays under 10 min on 2 cores
def test_two_host_arenas_split_a_step_that_fits_neither(mlp, monkeypatch, tmp_path):
    graph, _, _ = mlp
    monkeypatch.setenv("ARENAPLAN_CACHE_DIR", str(tmp_path))
    peak = optimize_order(graph, use_solver=False).peak_bytes
    budgets = {"cpu": int(peak * 0.8), "cpu:1": peak // 2}
    plan = plan_graph(graph, PlanRequest(budgets=budgets, time_limit_s=30))
    report = validate_plan(graph, plan)
    assert report.ok, report.errors[:3]
    assert {s.device for s in plan.steps if isinstance(s, ComputeStep)} == {"cpu", "cpu:1"}
    assert any(isinstance(s, CopyStep) for s in plan.steps)
    assert all(d.arena_bytes <= budgets[d.device] for d in plan.devices)


def test_sixty_device_budgets_keep_a_two_second_limit(mlp):
    """60 budgets (the host and 59 fast devices) once took 17 s with a 2 s limit: the model
    grows with the square of the devices. It now places ops on the MODEL_DEVICES largest and
    says so; the request returns within the limit + 5% + 1 s, with a plan or a refusal."""
    graph, measured, _ = mlp
    devices = ["cpu", *(f"cuda:{k}" for k in range(59))]
    ops = [op.model_copy(update={"costs": {d: op.costs["cpu"] for d in devices}})
           for op in measured.ops]
    copies = [CopyFit(src=a, dst=b, latency_seconds=1e-7, bytes_per_second=2e10,
                      method="test: assumed link") for a in devices for b in devices if a != b]
    profile = measured.model_copy(update={"devices": devices, "ops": ops, "copies": copies})
    peak = optimize_order(graph, use_solver=False).peak_bytes
    for share in (1.0, 0.95):
        budgets = {"cpu": int(peak * share), **{d: peak // 8 for d in devices[1:]}}
        started = time.perf_counter()
        try:
            plan = plan_graph(graph, PlanRequest(budgets=budgets, profile=profile,
                                                 time_limit_s=2))
        except InfeasibleError as refusal:
            assert refusal.smallest_feasible is not None
        else:
            assert validate_plan(graph, plan, profile).ok
            assert all(d.arena_bytes <= budgets[d.device] for d in plan.devices)
        assert time.perf_counter() - started <= 2 * 1.05 + 1
