"""Real input values for every op: graph inputs (given or generated) and captured intermediates.

Generated inputs have the right shape and dtype; floats are drawn from [0.1, 1) so that Log, Sqrt
and divisions stay finite; integer inputs used as indices (Gather, GatherElements, OneHot, loss
labels, ...) are kept inside the range their consumers accept, found by following the value
through shape-only ops (Cast, Reshape, Unsqueeze, ...) to the op that indexes with it.

Intermediates are captured by running, on the CPU, the part of the graph they depend on with just
them exposed as graph outputs (the profiler asks for a chunk of them at a time, whose bytes fit its
memory allowance: planner.profile.capture_plan). When that fails (an op the CPU provider cannot
run), values are propagated op by op instead, each dropped after its last reader, and the outputs
of an op that cannot run are generated, so that every other op still gets real-shaped inputs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

from planner.errors import InvalidInputError
from planner.ir.graph import Graph, Op
from planner.profile.devices import CPU_PROVIDER, session_options

# Ops that pass their first input's values through (Concat: every input's, Where: its two
# branches'): an index stays an index. (Not Clip: clamping makes any value a valid index.)
_PASS_THROUGH = frozenset({
    "Cast", "Reshape", "Unsqueeze", "Squeeze", "Flatten", "Identity", "Expand", "Transpose",
    "Slice", "Concat", "Tile", "Gather", "GatherElements", "Split", "Where",
})
_ALL_POSITIONS = frozenset({"Concat"})
# Float types numpy draws directly (a GPT-2-small step's 1.4 GB of float32 inputs: 0.4 s instead
# of 3.4 s through float64 on the development machine; the whole-graph workspace measurement
# cannot be stopped while they are drawn).
_DIRECT_FLOATS = frozenset({np.dtype(np.float32), np.dtype(np.float64)})
_WHERE_POSITIONS = (1, 2)
# op type -> positional input that holds indices, and how to find the exclusive upper bound.
_INDEX_INPUTS = {
    "Gather": 1, "GatherElements": 1, "GatherND": 1, "ScatterElements": 1, "ScatterND": 1,
    "Scatter": 1, "OneHot": 0, "NegativeLogLikelihoodLoss": 1, "SoftmaxCrossEntropyLoss": 1,
}


def graph_input_values(graph: Graph, given: Mapping[str, np.ndarray] | None = None,
                       seed: int = 0) -> dict[int, np.ndarray]:
    """A value for every graph input: the given ones (checked), the rest generated."""
    given = dict(given or {})
    by_name = {graph.tensors[t].name: t for t in graph.inputs}
    unknown = sorted(set(given) - set(by_name))
    if unknown:
        raise InvalidInputError(
            f"input values name {', '.join(map(repr, unknown[:5]))}, which are not graph inputs "
            f"of '{graph.name}'; its inputs are: {', '.join(sorted(by_name)[:10])}"
        )
    rng = np.random.default_rng(seed)
    values: dict[int, np.ndarray] = {}
    for t in graph.inputs:
        tensor = graph.tensors[t]
        if tensor.name in given:
            values[t] = _checked(tensor.name, np.asarray(given[tensor.name]), tensor.dtype,
                                 tensor.shape)
        else:
            values[t] = generate_value(graph, t, rng)
    return values


def _checked(name: str, value: np.ndarray, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    if tuple(value.shape) != tuple(shape):
        raise InvalidInputError(
            f"input '{name}' has shape {list(value.shape)} but the graph expects {list(shape)}; "
            "bind symbolic dims with --dim to match the values"
        )
    if value.dtype != np.dtype(dtype):
        if np.can_cast(value.dtype, dtype, casting="same_kind"):
            return value.astype(dtype)
        raise InvalidInputError(
            f"input '{name}' has dtype {value.dtype}, the graph expects {dtype}"
        )
    return np.require(value, requirements="C")  # (ascontiguousarray makes 0-d arrays 1-d)


def generate_value(graph: Graph, t: int, rng: np.random.Generator) -> np.ndarray:
    """A value of tensor `t`'s shape and dtype; integers kept inside any index range."""
    tensor = graph.tensors[t]
    dtype = np.dtype(tensor.dtype)
    shape = tensor.shape
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if np.issubdtype(dtype, np.integer):
        high = index_upper_bound(graph, t)
        high = 4 if high is None else high
        high = max(1, min(high, int(np.iinfo(dtype).max)))
        return rng.integers(0, high, size=shape, dtype=dtype)
    if dtype in _DIRECT_FLOATS:  # drawn in their own precision: 10x faster than via float64
        value = rng.random(shape, dtype=dtype)
        value *= 0.9
        value += 0.1
        return value
    if np.issubdtype(dtype, np.floating) or np.issubdtype(dtype, np.complexfloating):
        return rng.uniform(0.1, 1.0, size=shape).astype(dtype)
    raise InvalidInputError(
        f"cannot generate a value for input '{tensor.name}' of type {tensor.dtype}; pass its "
        "values with --inputs values.npz"
    )


def index_upper_bound(graph: Graph, t: int, _seen: frozenset[int] = frozenset()) -> int | None:
    """Smallest exclusive upper bound any consumer puts on the integer values of tensor `t`."""
    bounds: list[int] = []
    for c in graph.tensors[t].consumers:
        op = graph.ops[c]
        for position, tid in enumerate(op.inputs):
            if tid != t:
                continue
            bound = _bound_from(graph, op, position)
            if bound is not None:
                bounds.append(bound)
            elif op.op_type in _PASS_THROUGH and _passes(op.op_type, position):
                for out in op.output_ids:
                    if out not in _seen and np.issubdtype(np.dtype(graph.tensors[out].dtype),
                                                          np.integer):
                        sub = index_upper_bound(graph, out, _seen | {t})
                        if sub is not None:
                            bounds.append(sub)
    return min(bounds) if bounds else None


def _passes(op_type: str, position: int) -> bool:
    if op_type in _ALL_POSITIONS:
        return True
    return position in _WHERE_POSITIONS if op_type == "Where" else position == 0


def _bound_from(graph: Graph, op: Op, position: int) -> int | None:
    if _INDEX_INPUTS.get(op.op_type) != position:
        return None
    data_shape = graph.tensors[op.inputs[0]].shape if op.inputs[0] is not None else ()
    axis = int(op.attributes.get("axis", 0))
    if op.op_type in ("Gather", "GatherElements", "ScatterElements", "Scatter"):
        return data_shape[axis % len(data_shape)] if data_shape else None
    if op.op_type in ("GatherND", "ScatterND"):
        return min(data_shape) if data_shape else None
    if op.op_type in ("NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"):
        return data_shape[1] if len(data_shape) > 1 else None
    if op.op_type == "OneHot":
        depth = _constant_value(graph, op.inputs[1])
        if depth is not None and depth.size:
            return max(1, int(depth.reshape(-1)[0]))
    return None


def _constant_value(graph: Graph, t: int | None) -> np.ndarray | None:
    if t is None:
        return None
    name = graph.tensors[t].name
    for init in graph.proto.graph.initializer:
        if init.name == name:
            return numpy_helper.to_array(init)
    producer = graph.tensors[t].producer
    if producer is not None and graph.ops[producer].op_type == "Constant":
        value = graph.ops[producer].attributes.get("value")
        return np.asarray(value) if value is not None else None
    return None


def initializer_values(graph: Graph) -> dict[int, np.ndarray]:
    return {graph.tensor(init.name).id: numpy_helper.to_array(init)
            for init in graph.proto.graph.initializer}


def resident_values(graph: Graph, given: Mapping[str, np.ndarray] | None = None
                    ) -> dict[int, np.ndarray]:
    """The values every capture is fed or holds: graph inputs (given or generated) and
    initializers."""
    values = graph_input_values(graph, given)
    values.update(initializer_values(graph))
    return values


def capture_values(graph: Graph, given: Mapping[str, np.ndarray] | None = None,
                   threads: int = 1) -> dict[int, np.ndarray]:
    """A value for every tensor of the graph (inputs, initializers, every op output): the whole
    step at once, for small graphs (the profiler captures in chunks, `capture_tensors`)."""
    values = resident_values(graph, given)
    values.update(capture_tensors(graph, values, [t for op in graph.ops for t in op.output_ids],
                                  threads))
    return values


def producers_of(graph: Graph, wanted: Collection[int]) -> list[Op]:
    """The ops that `wanted` tensors depend on (their producers and those ops' own producers,
    transitively), in graph order."""
    needed: set[int] = set()
    stack = [graph.tensors[t].producer for t in wanted]
    while stack:
        op_id = stack.pop()
        if op_id is None or op_id in needed:
            continue
        needed.add(op_id)
        stack.extend(graph.tensors[t].producer for t in graph.ops[op_id].input_ids)
    return [graph.ops[i] for i in sorted(needed)]


def capture_tensors(graph: Graph, resident: Mapping[int, np.ndarray], wanted: Collection[int],
                    threads: int = 1) -> dict[int, np.ndarray]:
    """The values of the op outputs `wanted`, from one run of only the ops they depend on, fed
    the graph inputs in `resident`; no other intermediate outlives the run."""
    wanted = [t for t in dict.fromkeys(wanted) if graph.tensors[t].producer is not None]
    if not wanted:
        return {}
    ops = producers_of(graph, wanted)
    try:
        return _run_subgraph(graph, ops, resident, wanted, threads)
    except Exception:  # noqa: BLE001 - any ORT failure: fall back to op-by-op propagation
        return _propagate_op_by_op(graph, ops, resident, wanted, threads)


def _run_subgraph(graph: Graph, ops: list[Op], values: Mapping[int, np.ndarray],
                  wanted: list[int], threads: int) -> dict[int, np.ndarray]:
    """`ops` (graph order) run as one session whose outputs are `wanted`. The session has no
    arena: every value is its own allocation, so the intermediates it frees along the run and
    its working memory are given back at once instead of staying in arena regions that the
    returned values pin."""
    model = onnx.ModelProto()
    model.CopyFrom(graph.proto)
    typed = {v.name: v for v in [*model.graph.value_info, *model.graph.output, *model.graph.input]}
    kept = {graph.tensors[t].name for op in ops for t in op.output_ids}
    nodes = [n for n in model.graph.node if any(name in kept for name in n.output if name)]
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    del model.graph.output[:]
    for t in wanted:
        name = graph.tensors[t].name
        model.graph.output.append(typed.get(name) or _value_info(graph, t))
    options = session_options(threads)
    options.enable_cpu_mem_arena = False
    session = ort.InferenceSession(model.SerializeToString(), options, providers=[CPU_PROVIDER])
    feeds = {graph.tensors[t].name: values[t] for t in graph.inputs}
    outputs = session.run([graph.tensors[t].name for t in wanted], feeds)
    return dict(zip(wanted, outputs, strict=True))


def _value_info(graph: Graph, t: int) -> onnx.ValueInfoProto:
    tensor = graph.tensors[t]
    return onnx.helper.make_tensor_value_info(tensor.name, tensor.elem_type, list(tensor.shape))


def _propagate_op_by_op(graph: Graph, ops: list[Op], values: Mapping[int, np.ndarray],
                        wanted: list[int], threads: int) -> dict[int, np.ndarray]:
    """`ops` run one by one (the outputs of an op that cannot run on the CPU are generated), each
    intermediate dropped after its last reader among them unless it is wanted."""
    from planner.profile.single_node import single_node_model

    keep = set(wanted)
    readers = Counter(t for op in ops for t in op.input_ids)
    known = dict(values)
    rng = np.random.default_rng(1)
    for op in ops:
        try:
            model = single_node_model(graph, op)
            session = ort.InferenceSession(model.SerializeToString(), session_options(threads),
                                           providers=[CPU_PROVIDER])
            feeds = {graph.tensors[t].name: known[t] for t in op.input_ids}
            outs = session.run([graph.tensors[t].name for t in op.output_ids], feeds)
            known.update(zip(op.output_ids, outs, strict=True))
        except Exception:  # noqa: BLE001 - the op cannot run on the CPU: make up its outputs
            known.update({t: generate_value(graph, t, rng) for t in op.output_ids})
        readers.subtract(op.input_ids)
        for t in (*op.input_ids, *op.output_ids):
            if readers[t] <= 0 and t not in keep and t not in values:
                known.pop(t, None)
    return {t: known[t] for t in wanted}
