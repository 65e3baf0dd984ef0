"""The roofline fallback is calibrated against measured ops (planner.profile.estimate): on a
fixture measured now, estimated/measured stays near 1 per op and summed over the graph. The bare
roofline's median was 0.07 on cnn_bn_momentum and 0.25 on gpt2_tiny_adam, a tenth of the ops
under 0.01, and its sums 0.27 and 0.49 (bench/profile/estimates.md)."""

from __future__ import annotations

import math
import statistics

import pytest
from onnx import helper

from planner.ir.graph import load_graph
from planner.profile import QUICK_POLICY, profile_graph
from planner.profile.devices import Device
from planner.profile.estimate import (
    estimate_seconds,
    measure_roofline,
    narrow_broadcast,
    op_flops,
    roofline_seconds,
)
from tests.support.fixture_zoo import model_path
from tests.support.onnx_builders import make_model, scalar, value

pytestmark = pytest.mark.usefixtures("private_profile_cache")


@pytest.mark.parametrize("name", ["cnn_bn_momentum", "gpt2_tiny_adam"])
def test_estimates_match_measured_ops(name):
    g = load_graph(model_path(name), optimization="extended")
    profile = profile_graph(g, cache=None, policy=QUICK_POLICY)
    roof = measure_roofline(Device("cpu"), 1)
    pairs = {(op.op_type, estimate_seconds(g, op, roof), entry.costs["cpu"].median_seconds)
             for op, entry in zip(g.ops, profile.ops, strict=True)
             if entry.costs["cpu"].source == "measured" and entry.costs["cpu"].median_seconds > 0}
    ratios = [est / measured for _, est, measured in pairs]  # one per distinct measurement
    tenth = statistics.quantiles(ratios, n=10)[0]
    # The factors were fitted on a host where these medians were near 1; on one that runs plain
    # Python about 2x slower they read 0.31-0.52 (tenths 0.20-0.27): the launch floor is a fixed
    # 0.32 us, not measured per host as the roofline is. The bare roofline's median was 0.07
    # and its tenth under 0.01, which these bounds still tell apart.
    assert 0.25 < statistics.median(ratios) < 2, statistics.median(ratios)
    assert tenth > 0.1, tenth  # small ops are priced at a launch, not at their bytes
    total = sum(est for _, est, _ in pairs) / sum(measured for _, _, measured in pairs)
    # The sums too: cnn_bn_momentum's read 0.42-0.55 on this shared host on a slow day (its
    # ops measured 1.2-1.5x what they took two days before); the bare roofline's was 0.27.
    assert 0.35 < total < 2, total


def test_fused_matmul_counts_its_products():
    g = load_graph(model_path("gpt2_tiny_adam"), optimization="extended")
    fused = [op for op in g.ops if op.op_type == "FusedMatMul"]
    assert fused
    for op in fused:
        a = g.tensors[op.inputs[0]].shape
        k = a[-2] if op.attributes.get("transA", 0) else a[-1]
        out = math.prod(g.tensors[op.outputs[0]].shape)
        assert op_flops(g, op) == 2 * out * k


def test_a_narrow_broadcast_is_priced_per_element():
    # MobileNetV2's and ResNet-18's weight decay on the (M, C, 1, 1) weights of 1x1 convs
    step = make_model([helper.make_node("Mul", ["w", "decay"], ["w2"])],
                      [value("w", [256, 128, 1, 1])], [value("w2", [256, 128, 1, 1])],
                      [scalar("decay", 0.9)])
    g = load_graph(step)
    (op,) = g.ops
    assert narrow_broadcast(g, op)
    measured = profile_graph(g, cache=None, policy=QUICK_POLICY).ops[0].costs["cpu"]
    roof = measure_roofline(Device("cpu"), 1)
    assert roofline_seconds(g, op, roof) / measured.median_seconds < 0.1  # ONNX Runtime's slow path
    assert 0.33 < estimate_seconds(g, op, roof) / measured.median_seconds < 3
