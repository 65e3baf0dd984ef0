"""Which input an op's output may share the storage of, by the op alone (no schedule).

The static half of the memory model's storage rules (planner.memory.sharing has the graph-wide
analysis, planner.memory.replay the per-schedule decisions). It sits in the IR so that the
profiler, which times an op over the input it may share (planner.profile.op_runner), asks the
same rule as the memory model.
"""

from __future__ import annotations

from planner.ir.graph import Graph, Op, Tensor
from schemas.graph_rewrite import VIEW_OP_TYPES
from schemas.plan import IN_PLACE_OP_TYPES, SINGLE_INPUT_IN_PLACE_OP_TYPES

# The plan contract names the ops (schemas.plan; the views in schemas.graph_rewrite, which our
# graph rewrites share): views write nothing (ONNX Runtime registers them with an output aliasing
# input 0 and skips the copy when the addresses are equal); the in-place ops read element i of
# every input before writing element i of the output (ONNX Runtime declares most of them
# `MayInplace`; tests/runtime/test_in_place_kernels.py proves each one bit-exact with the output
# bound on the input's bytes).
VIEW_OPS = VIEW_OP_TYPES
IN_PLACE_OPS = IN_PLACE_OP_TYPES
SINGLE_INPUT_IN_PLACE_OPS = SINGLE_INPUT_IN_PLACE_OP_TYPES
# ONNX Runtime's CUDA Max/Min with three or more inputs (broadcast, or more than eight) zero the
# output before accumulating into it: in place only with two inputs.
VARIADIC_OPS = frozenset({"Max", "Min"})


def over_inputs(op: Op) -> tuple[int, ...]:
    """The inputs `op` may write its output over: for a scatter or Gemm only its one input (and
    only when no other input reads the same tensor: it reads them while writing), else any."""
    slot = SINGLE_INPUT_IN_PLACE_OPS.get(op.op_type)
    if slot is None:
        return op.input_ids
    target = op.inputs[slot] if slot < len(op.inputs) else None
    if target is None or target in op.inputs[:slot] + op.inputs[slot + 1:]:
        return ()
    return (target,)


def same_bytes(a: Tensor, b: Tensor) -> bool:
    """Equal shape and dtype: one may be written over the other element by element."""
    return a.shape == b.shape and a.elem_type == b.elem_type


def view_source_of(graph: Graph, op: Op) -> int | None:
    """The tensor whose bytes `op`'s output reinterprets, if `op` is a view (same byte count)."""
    out = op.outputs[0] if op.outputs else None
    if out is None or op.op_type not in VIEW_OPS or not op.inputs or op.inputs[0] is None:
        return None
    src = op.inputs[0]
    return src if graph.tensors[src].nbytes == graph.tensors[out].nbytes else None


def in_place_inputs(graph: Graph, op: Op) -> tuple[int, ...]:
    """The inputs `op`'s one output may be written over (same shape and dtype, not a constant),
    whatever the schedule: the static candidates the replay chooses among."""
    out = op.outputs[0] if op.outputs else None
    if (out is None or op.op_type not in IN_PLACE_OPS or len(op.output_ids) != 1
            or (op.op_type in VARIADIC_OPS and len(op.inputs) > 2)):
        return ()
    tensors = graph.tensors
    return tuple(t for t in over_inputs(op)
                 if same_bytes(tensors[t], tensors[out]) and not tensors[t].is_initializer)


def shared_input(graph: Graph, op: Op) -> int | None:
    """The input whose storage `op`'s output takes when it shares one: a view's source, else
    the first in-place candidate (what the profile times the op over: planner.profile)."""
    source = view_source_of(graph, op)
    if source is not None:
        return source
    return next(iter(in_place_inputs(graph, op)), None)
