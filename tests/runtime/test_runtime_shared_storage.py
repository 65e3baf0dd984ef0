"""Plans whose values share storage (schema version 2) run bit-identical to ONNX Runtime.

- The optimizers' update chains (SGD, momentum and BatchNorm running statistics, Adam) run in
  place: each state's new value is written into the state's own bytes, so nothing is copied
  between steps, and 5 steps equal a whole-graph ONNX Runtime session bit for bit.
- A state whose new value has bytes of its own is copied back between steps, equally exact.
- Views and in-place values in one segment or one session per op give the same bits.
"""

from __future__ import annotations

import numpy as np
import pytest

from runtime.executor import ExecutorOptions, PlanExecutor
from runtime.inputs import read_npz
from runtime.model import read_model
from runtime.reference import ReferenceSession, compare_outputs
from schemas.plan import Plan
from tests.support.fixture_zoo import inputs_path, model_path, sidecar
from tests.support.reference import reference_diffs
from tests.support.runtime_plans import full_budget_plan

OPTIMIZERS = ["mlp_sgd", "cnn_bn_momentum", "gpt2_tiny_adam"]  # SGD, momentum + BN, Adam
STEPS = 5


def run_beside_reference(name: str, plan: Plan) -> PlanExecutor:
    """`STEPS` steps of the plan and of a whole-graph session on the fixture's inputs, state fed
    back on both sides: every output of every step is bit-identical, the loss changes, and
    after each step every state's buffer holds its new value."""
    model = read_model(model_path(name))
    executor = PlanExecutor(model, plan)
    reference = ReferenceSession(model, plan.state_updates)
    values = read_npz(inputs_path(name), model)
    executor.load_inputs(values)
    reference.load_inputs(values)
    losses = []
    for step in range(1, STEPS + 1):
        executor.step()
        reference.step()
        diffs = compare_outputs(executor.outputs(), reference.last)
        worst = max(diffs, key=diffs.get)
        assert diffs[worst] == 0.0, f"step {step}: {worst} differs by {diffs[worst]}"
        losses.append(executor.output(sidecar(name)["loss_output"]))
    assert len(set(np.asarray(losses).tolist())) == STEPS, "state must be fed back"
    return executor


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_optimizer_chains_leave_the_new_state_in_the_states_bytes(name):
    plan = full_budget_plan(name)
    buffers = {b.id: b for b in plan.buffers}
    for state, output in plan.state_updates.items():
        old, new = buffers[plan.graph_inputs[state]], buffers[plan.graph_outputs[output]]
        assert old.owns_storage and new.storage == old.id and new.shares == "in_place", state
        assert (new.device, new.offset) == (old.device, old.offset)
    executor = run_beside_reference(name, plan)
    assert executor.states_fed_by_copy == []  # no copy between steps
    for state, output in plan.state_updates.items():  # the state's buffer is the new value
        view = executor.host_view(plan.graph_inputs[state])
        assert view.tobytes() == executor.output(output).tobytes()


def _own_bytes_for_one_update(plan: Plan) -> tuple[Plan, str]:
    """The plan with one state's new value (the largest) given bytes of its own past the arena's
    end instead of the state's: that state is then copied back between steps."""
    data = plan.model_dump(mode="json")
    buffers = {b["id"]: b for b in data["buffers"]}
    state, output = max(plan.state_updates.items(),
                        key=lambda item: buffers[plan.graph_outputs[item[1]]]["size"])
    new = buffers[plan.graph_outputs[output]]
    device = next(d for d in data["devices"] if d["device"] == new["device"])
    new.update(storage=new["id"], storage_offset=0, shares=None, offset=device["arena_bytes"])
    device["arena_bytes"] += new["size"]
    return Plan.model_validate(data), state


@pytest.mark.parametrize("name", ["mlp_sgd", "cnn_bn_momentum"])
def test_a_state_update_with_bytes_of_its_own_is_copied_back(name):
    plan, state = _own_bytes_for_one_update(full_budget_plan(name))
    executor = run_beside_reference(name, plan)
    assert executor.states_fed_by_copy == [state]


@pytest.mark.parametrize("options", [
    ExecutorOptions(fuse=False),  # one session per op: every view and in-place op on its own
    ExecutorOptions(optimization="basic"),  # segments grouped without relying on node order
], ids=["per-op", "order-free-segments"])
@pytest.mark.parametrize("name", OPTIMIZERS)
def test_views_and_in_place_values_in_every_execution_mode(name, options):
    plan = full_budget_plan(name)
    assert {b.shares for b in plan.buffers} == {None, "view", "in_place"}
    for step, (worst, diff) in enumerate(reference_diffs(name, plan, options, STEPS), 1):
        assert diff == 0.0, f"step {step}: {worst} differs by {diff}"
