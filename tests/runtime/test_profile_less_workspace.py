"""A plan made without a profile bounds the process's peak (issue 16 item 2): its workspace,
measured by one whole-graph ONNX Runtime session (planner.profile.graph_workspace), is reserved,
and `arenaplan run --strict-memory` in a fresh process stays within the plan's arena, that
workspace and the fixed overhead (runtime.measure)."""

from __future__ import annotations

from planner.pipeline import plan_model
from schemas.plan import PlanRequest
from tests.runtime.test_runtime_workspace import assert_steps_within_arena_workspace_and_overhead
from tests.support.fixture_zoo import model_path


def test_a_profile_less_plan_runs_within_its_arena_workspace_and_overhead(tmp_path):
    name = "unet_small"
    plan = plan_model(model_path(name), PlanRequest(budgets={"cpu": 2**40}, time_limit_s=5))
    (device,) = plan.devices
    assert device.workspace_bytes > 0  # convolutions' scratch: 1 MiB (0 before it was measured)
    assert_steps_within_arena_workspace_and_overhead(plan, name, tmp_path)
