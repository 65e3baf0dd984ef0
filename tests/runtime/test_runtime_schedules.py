"""The plans tests/support/runtime_plans.py builds from explicit schedules are what they claim:
recomputations of forward ops, and two devices with copies between their arenas."""

from __future__ import annotations

from planner.ir.graph import Region
from schemas.plan import ComputeStep, CopyStep
from tests.support.runtime_plans import fixture_graph, recompute_plan, two_device_plan


def test_recompute_plans_recompute_forward_ops_and_validate():
    plan = recompute_plan("cnn_bn_momentum")
    recomputed = [s for s in plan.steps if isinstance(s, ComputeStep) and s.recompute]
    assert len(recomputed) >= 3
    graph = fixture_graph("cnn_bn_momentum")
    assert all(graph.ops[s.op_id].region is Region.FORWARD for s in recomputed)
    # a recomputed value gets a second buffer of its own
    tensors = [b.tensor for b in plan.buffers]
    assert any(tensors.count(graph.tensors[graph.ops[s.op_id].output_ids[0]].name) == 2
               for s in recomputed)


def test_two_device_plans_use_both_arenas_and_copy_between_them():
    plan = two_device_plan("mlp_sgd")
    assert {d.device for d in plan.devices} == {"cpu", "cpu:1"}
    assert {s.device for s in plan.steps if isinstance(s, ComputeStep)} == {"cpu", "cpu:1"}
    buffers = {b.id: b for b in plan.buffers}
    copies = [s for s in plan.steps if isinstance(s, CopyStep)]
    assert any(buffers[c.src].device != buffers[c.dst].device for c in copies)
    assert {buffers[b].device for b in plan.graph_inputs.values()} == {"cpu", "cpu:1"}
