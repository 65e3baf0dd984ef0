"""Devices: names, devices this machine lacks, ops a device cannot run, the estimate fallback,
and (on machines with a GPU) the CUDA paths."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from planner.errors import InvalidInputError
from planner.ir.graph import load_graph
from planner.profile import QUICK_POLICY, copy_seconds, profile_graph
from planner.profile.devices import Device, cuda_really_available, parse_device
from planner.profile.estimate import LAUNCH_FLOOR_S, SLOWDOWN
from schemas.profile import Roofline
from tests.support.onnx_builders import make_model, tiny_momentum_step, value

needs_cuda = pytest.mark.skipif(
    not cuda_really_available(0), reason="no session really gets CUDAExecutionProvider here"
)


def int64_relu_step():
    """Relu on int64 passes the ONNX checker but has no CPU kernel in onnxruntime."""
    nodes = [
        helper.make_node("Cast", ["x"], ["xi"], to=TensorProto.INT64),
        helper.make_node("Relu", ["xi"], ["ri"]),
        helper.make_node("Cast", ["ri"], ["rf"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["rf", "x"], ["y"]),
    ]
    return make_model(nodes, [value("x", [4, 8])], [value("y", [4, 8])])


def test_parse_device():
    assert parse_device("cpu") == Device("cpu")
    assert parse_device("CUDA:1") == Device("cuda", 1)
    assert parse_device("cuda").name == "cuda:0"
    for bad in ("gpu", "cuda:x", "cpu:1", "tpu:0", ""):
        with pytest.raises(InvalidInputError, match="cpu"):
            parse_device(bad)


@pytest.mark.skipif(cuda_really_available(0), reason="this machine has a usable CUDA device")
def test_a_device_the_machine_lacks_is_a_clear_error():
    graph = load_graph(tiny_momentum_step(), dims={"batch": 2})
    with pytest.raises(InvalidInputError, match="cuda:0 cannot be used"):
        profile_graph(graph, ["cpu", "cuda:0"], cache=None, policy=QUICK_POLICY)


def test_op_a_device_cannot_run_is_unsupported_and_estimated():
    graph = load_graph(int64_relu_step())
    roof = Roofline(peak_flops=1e10, bytes_per_second=1e10, source="measured")
    profile = profile_graph(graph, cache=None, policy=QUICK_POLICY, rooflines={"cpu": roof})
    relu = profile.ops[1]
    assert relu.op_type == "Relu"
    assert "cpu" in relu.unsupported and "NOT_IMPLEMENTED" in relu.unsupported["cpu"]
    estimated = relu.costs["cpu"]
    assert estimated.source == "estimated" and estimated.repeats == 0
    bytes_bound = 2 * 32 * 8 / 1e10  # calibrated: a launch plus Relu's measured slowdown
    assert estimated.median_seconds == pytest.approx(LAUNCH_FLOOR_S
                                                     + SLOWDOWN["Relu"] * bytes_bound)
    assert profile.rooflines["cpu"].source == "configured"
    # every other op still got real inputs (outputs of the Relu were generated) and a measurement
    for entry in (profile.ops[0], profile.ops[2], profile.ops[3]):
        assert entry.costs["cpu"].source == "measured" and not entry.unsupported


def test_estimate_with_a_measured_roofline(tmp_path):
    graph = load_graph(int64_relu_step())
    profile = profile_graph(graph, cache=tmp_path / "c.sqlite", policy=QUICK_POLICY)
    roof = profile.rooflines["cpu"]
    assert roof.source == "measured" and roof.peak_flops > 1e8 and roof.bytes_per_second > 1e8
    assert profile.ops[1].costs["cpu"].source == "estimated"
    again = profile_graph(graph, cache=tmp_path / "c.sqlite", policy=QUICK_POLICY)
    assert again.rooflines["cpu"] == roof  # measured once per machine, then cached
    assert again.cache.misses == 0


@pytest.mark.cuda
@needs_cuda
def test_cuda_profile_measures_ops_and_copies():
    graph = load_graph(tiny_momentum_step(), dims={"batch": 256})
    profile = profile_graph(graph, ["cpu", "cuda:0"], cache=None, policy=QUICK_POLICY)
    assert "CUDAExecutionProvider" in profile.machine.providers["cuda:0"]
    assert profile.machine.gpus["cuda:0"]
    for entry in profile.ops:
        assert set(entry.costs) | set(entry.unsupported) == {"cpu", "cuda:0"}
        if "cuda:0" in entry.costs:
            assert entry.costs["cuda:0"].source == "measured"
    pairs = {(f.src, f.dst) for f in profile.copies}
    assert pairs == {("cpu", "cuda:0"), ("cuda:0", "cpu")}
    for fit in profile.copies:
        assert fit.bytes_per_second > 1e8 and len(fit.samples) >= 3
    small = copy_seconds(profile, "cpu", "cuda:0", 1024)
    assert copy_seconds(profile, "cpu", "cuda:0", 64 << 20) > small > 0


@pytest.mark.cuda
@needs_cuda
def test_cuda_timing_synchronizes():
    """A big MatMul takes real GPU time: a timing of an asynchronous launch would be ~10 us."""
    from onnx import helper as h

    n = 2048
    model = make_model([h.make_node("MatMul", ["a", "b"], ["c"])],
                       [value("a", [n, n]), value("b", [n, n])], [value("c", [n, n])])
    graph = load_graph(model)
    profile = profile_graph(graph, ["cuda:0"], cache=None, policy=QUICK_POLICY,
                            copy_sizes=[1 << 20])
    seconds = profile.ops[0].costs["cuda:0"].median_seconds
    flops = 2 * n**3
    assert flops / seconds < 2e15  # no GPU does this faster than 2 PFLOP/s in fp32
    np.testing.assert_array_less(0, seconds)
