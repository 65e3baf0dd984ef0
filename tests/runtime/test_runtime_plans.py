"""Plans with recomputation and plans over two arenas run bit-identical to ONNX Runtime, step by
step (5 steps, state fed back)."""

from __future__ import annotations

import pytest

from runtime.executor import ExecutorOptions, PlanExecutor
from schemas.plan import ComputeStep, CopyStep
from tests.support.fixture_zoo import REQUIRED, model_path
from tests.support.reference import reference_diffs
from tests.support.runtime_plans import recompute_plan, two_device_plan

FAST = ["mlp_sgd", "cnn_bn_momentum", "gpt2_tiny_adam"]
SLOW = [n for n in REQUIRED if n not in FAST]


def run_against_reference(name: str, plan, options: ExecutorOptions, steps: int = 5) -> None:
    for step, (worst, diff) in enumerate(reference_diffs(name, plan, options, steps), 1):
        assert diff == 0, f"step {step}: {worst} differs by {diff}"  # bit-identical


def _params(names):
    return [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in names]


@pytest.mark.parametrize("fuse", [True, False], ids=["segments", "per-op"])
@pytest.mark.parametrize("name", _params(REQUIRED))
def test_recompute_plans_match(name, fuse):
    plan = recompute_plan(name)
    assert any(isinstance(s, ComputeStep) and s.recompute for s in plan.steps)
    run_against_reference(name, plan, ExecutorOptions(fuse=fuse))


@pytest.mark.parametrize("fuse", [True, False], ids=["segments", "per-op"])
@pytest.mark.parametrize("name", _params(REQUIRED))
def test_two_device_plans_match(name, fuse):
    plan = two_device_plan(name)
    buffers = {b.id: b for b in plan.buffers}
    assert any(isinstance(s, CopyStep) and buffers[s.src].device != buffers[s.dst].device
               for s in plan.steps)
    run_against_reference(name, plan, ExecutorOptions(fuse=fuse))


def test_two_device_plans_allocate_one_arena_per_device():
    plan = two_device_plan("cnn_bn_momentum")
    executor = PlanExecutor(model_path("cnn_bn_momentum"), plan)
    assert executor.arena_bytes == {d.device: d.arena_bytes for d in plan.devices}
    assert len({a.base_ptr for a in executor.arenas.values()}) == 2
    # state lives on both devices: some updates are fed back into cpu:1's persistent zone
    homes = {buffers.device for buffers in plan.buffers if buffers.id in
             {plan.graph_inputs[s] for s in plan.state_updates}}
    assert homes == {"cpu", "cpu:1"}
