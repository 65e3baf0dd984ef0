"""The loader on ONNX Runtime's rewrite of a model (planner.ir.optimized, schemas.optimized_graph):
it takes exactly the fused ops ONNX Runtime writes, refuses others clearly, drops the copies the
CUDA provider inserts, and falls back to the provider-independent basic level when a GPU's
provider cannot start here."""

from __future__ import annotations

import hashlib

import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from planner.errors import OptimizedGraphError, UnsupportedOperatorError
from planner.ir.graph import load_graph
from planner.ir.onnx_model import load_checked_model
from planner.ir.optimized import check_state_kept
from schemas.optimized_graph import (
    CPU_PROVIDER,
    CUDA_PROVIDER,
    FUSED_OPS,
    _without_copy_nodes,
    optimized_model,
    providers_for,
)
from tests.support.fixture_zoo import fixture_names, model_path


def _model(nodes: list[onnx.NodeProto], inputs: list[str], outputs: list[str]) -> onnx.ModelProto:
    def info(name: str) -> onnx.ValueInfoProto:
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, [2, 2])

    graph = helper.make_graph(nodes, "g", [info(n) for n in inputs], [info(n) for n in outputs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18),
                                                   helper.make_opsetid("com.microsoft", 1)],
                             ir_version=10)


def test_a_contrib_op_optimization_does_not_write_is_refused_clearly():
    model = _model([helper.make_node("Attention", ["x", "w"], ["y"], domain="com.microsoft")],
                   ["x", "w"], ["y"])
    with pytest.raises(UnsupportedOperatorError, match="Attention.*graph optimization 'basic'"):
        load_checked_model(model.SerializeToString(), optimized=True)


def test_a_fused_op_is_accepted_only_in_onnxruntime_s_rewrite():
    node = helper.make_node("FusedMatMul", ["x", "w"], ["y"], domain="com.microsoft", alpha=0.5)
    data = _model([node], ["x", "w"], ["y"]).SerializeToString()
    assert load_checked_model(data, optimized=True).proto.graph.node[0].op_type == "FusedMatMul"
    with pytest.raises(UnsupportedOperatorError, match="only standard ONNX ops"):
        load_checked_model(data)


def test_provider_copies_are_dropped_and_readers_read_the_source():
    nodes = [
        helper.make_node("MemcpyFromHost", ["x"], ["x_gpu"]),
        helper.make_node("Relu", ["x_gpu"], ["r"]),
        helper.make_node("MemcpyToHost", ["r"], ["y"]),  # writes a graph output: kept, Identity
        helper.make_node("Neg", ["x_gpu"], ["z"]),
    ]
    rewritten = onnx.load_from_string(
        _without_copy_nodes(_model(nodes, ["x"], ["y", "z"]).SerializeToString()))
    assert [(n.op_type, list(n.input), list(n.output)) for n in rewritten.graph.node] == [
        ("Relu", ["x"], ["r"]), ("Identity", ["r"], ["y"]), ("Neg", ["x"], ["z"])]


def test_a_graph_without_copies_keeps_onnxruntime_s_bytes():
    data = _model([helper.make_node("Relu", ["x"], ["y"])], ["x"], ["y"]).SerializeToString()
    assert _without_copy_nodes(data) == data


def test_providers_follow_the_devices():
    assert providers_for(["cpu", "cpu:1"]) == [CPU_PROVIDER]
    assert providers_for(["cpu", "cuda:0"]) == [CUDA_PROVIDER, CPU_PROVIDER]


def _cuda_runs() -> bool:
    data = _model([helper.make_node("Relu", ["x"], ["y"])], ["x"], ["y"]).SerializeToString()
    try:
        session = ort.InferenceSession(data, providers=[CUDA_PROVIDER, CPU_PROVIDER])
    except Exception:  # noqa: BLE001
        return False
    return CUDA_PROVIDER in session.get_providers()


def test_a_gpu_request_gets_extended_for_cuda_or_the_basic_graph_without_one():
    graph = load_graph(model_path("mlp_sgd"), optimization="extended", devices=["cuda:0"])
    assert graph.optimized is not None
    if _cuda_runs():
        assert graph.optimized.level == "extended"
        assert graph.optimized.providers == [CUDA_PROVIDER, CPU_PROVIDER]
        assert not {n.op_type for n in graph.proto.graph.node} & {"MemcpyFromHost",
                                                                  "MemcpyToHost"}
    else:
        assert graph.optimized.level == "basic"
        assert graph.optimized.providers == [CPU_PROVIDER]


def test_the_rewrite_is_the_same_bytes_every_time():
    data = model_path("gpt2_tiny_adam").read_bytes()
    digests = {hashlib.sha256(optimized_model(data, "extended", [CPU_PROVIDER])).hexdigest()
               for _ in range(2)}
    assert len(digests) == 1


@pytest.mark.parametrize("name", fixture_names())
def test_the_rewrite_needs_no_data_propagation(name):
    """The rewrite is shape-inferred without propagating data (0.17 s of GPT-2-small's 0.22 s
    of inference): it carries every shape propagated into the model as sent, so propagating
    again changes nothing."""
    data = optimized_model(model_path(name).read_bytes(), "extended", [CPU_PROVIDER])
    proto = load_checked_model(data, optimized=True).proto
    again = onnx.shape_inference.infer_shapes(proto, check_type=True, strict_mode=True,
                                              data_prop=True)
    assert again.SerializeToString() == proto.SerializeToString()


def test_a_rewrite_that_loses_a_state_output_is_refused():
    rewritten = _model([helper.make_node("Relu", ["p"], ["other"])], ["p"], ["other"])
    with pytest.raises(OptimizedGraphError, match="p -> p_new"):
        check_state_kept({"p": "p_new"}, rewritten, "basic")


FUSED_OP_INPUTS = {
    "Gelu": [[2, 4]], "QuickGelu": [[2, 4]], "FastGelu": [[2, 4]], "BiasGelu": [[2, 4], [4]],
    "SkipLayerNormalization": [[1, 2, 4], [1, 2, 4], [4], [4]],
    "SkipSimplifiedLayerNormalization": [[1, 2, 4], [1, 2, 4], [4]],
    "FusedMatMul": [[2, 4], [4, 4]], "FusedGemm": [[2, 4], [4, 4]],
    "FusedConv": [[1, 1, 4, 4], [1, 1, 1, 1]],
}


@pytest.mark.parametrize("op_type", sorted(FUSED_OPS))
def test_every_accepted_fused_op_has_a_cpu_kernel(op_type):
    """A plan may place any op on the CPU (where the profile says it runs), so each fused op the
    loader accepts must be runnable by the CPU provider."""
    names = [f"x{k}" for k in range(len(FUSED_OP_INPUTS[op_type]))]
    extra = {"activation": "Relu"} if op_type in ("FusedGemm", "FusedConv") else {}
    node = helper.make_node(op_type, names, ["y"], domain="com.microsoft", **extra)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
         for n, s in zip(names, FUSED_OP_INPUTS[op_type], strict=True)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18),
                                                    helper.make_opsetid("com.microsoft", 1)],
                              ir_version=10)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=[CPU_PROVIDER])
    assert session.get_providers() == [CPU_PROVIDER]
