"""A plan made without a profile bounds the process's peak (issue 16 item 2): its workspace,
measured by one whole-graph ONNX Runtime session (planner.profile.graph_workspace), is reserved,
and `arenaplan run --strict-memory` in a fresh process stays within the plan's arena, that
workspace and the fixed overhead (runtime.measure)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from planner.pipeline import plan_model
from runtime.measure import HOST_OVERHEAD_BYTES
from schemas.plan import PlanRequest
from tests.support.fixture_zoo import inputs_path, model_path

REPO = Path(__file__).resolve().parents[2]


def test_a_profile_less_plan_runs_within_its_arena_workspace_and_overhead(tmp_path):
    name = "unet_small"
    plan = plan_model(model_path(name), PlanRequest(budgets={"cpu": 2**40}, time_limit_s=5))
    (device,) = plan.devices
    assert device.workspace_bytes > 0  # convolutions' scratch: 1 MiB (0 before it was measured)
    reserved = device.arena_bytes + device.workspace_bytes
    request = plan.request.model_copy(update={"budgets": {"cpu": reserved}})
    tight = plan.model_copy(update={"request": request, "devices": [
        device.model_copy(update={"budget_bytes": reserved})]})
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(tight.model_dump_json())
    done = subprocess.run(
        [sys.executable, "-m", "arenaplan", "run", str(model_path(name)), "--plan",
         str(plan_file), "--inputs", str(inputs_path(name)), "--steps", "4", "--strict-memory",
         "--json"], cwd=REPO, capture_output=True, text=True, check=False, timeout=300)
    assert done.returncode == 0, done.stderr
    memory = json.loads(done.stdout)["memory"]
    if not memory["measured"]:
        pytest.skip("this OS does not let a process reset its peak RSS")
    assert memory["reserved_bytes"] == memory["budget_bytes"] == reserved
    assert memory["within_budget"]
    assert 0 < memory["peak_growth_bytes"] <= reserved + HOST_OVERHEAD_BYTES
