"""Build the one-op ONNX models that profiling runs, straight from the graph IR.

Every present input of the op becomes a graph input (a tensor used twice is one input), so the
kernel sees exactly what it sees in the full graph: no initializer, hence no weight pre-packing.
The model keeps the graph's IR version and opset imports. With `copies=k` the op appears k times,
reading the same inputs and writing distinct outputs: timing 1 and k copies and taking the
difference removes the fixed cost of a session run (see planner.profile.timing). Only the first
copy's outputs are graph outputs (bound by the caller); the other copies' outputs are internal, so
ONNX Runtime allocates and frees them from its arena as it does for intermediates of the graph
(it still runs those nodes: with optimizations disabled nothing is pruned).
"""

from __future__ import annotations

import onnx
from onnx import helper

from planner.ir.graph import Graph, Op


def copy_output_name(name: str, copy: int) -> str:
    return name if copy == 0 else f"{name}__copy{copy}"


def single_node_model(graph: Graph, op: Op, copies: int = 1) -> onnx.ModelProto:
    node = graph.proto.graph.node[op.id]
    inputs = [_value_info(graph, t, graph.tensors[t].name) for t in op.input_ids]
    nodes: list[onnx.NodeProto] = []
    outputs: list[onnx.ValueInfoProto] = []
    for k in range(copies):
        clone = onnx.NodeProto()
        clone.CopyFrom(node)
        clone.name = f"{node.name or op.op_type}__{k}"
        del clone.output[:]
        clone.output.extend(copy_output_name(n, k) if n else "" for n in node.output)
        nodes.append(clone)
        if k == 0:
            outputs.extend(_value_info(graph, t, graph.tensors[t].name) for t in op.output_ids)
    model_graph = helper.make_graph(nodes, f"profile_{op.op_type}", inputs, outputs)
    model = helper.make_model(
        model_graph, opset_imports=list(graph.proto.opset_import), ir_version=graph.ir_version
    )
    return model


def _value_info(graph: Graph, t: int, name: str) -> onnx.ValueInfoProto:
    tensor = graph.tensors[t]
    return helper.make_tensor_value_info(name, tensor.elem_type, list(tensor.shape))
