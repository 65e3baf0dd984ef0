"""From a traced training step (an FX graph of ATen ops) to the flat ONNX graph we hand out.

1. `torch.onnx.export(..., dynamo=True, optimize=False)`: the exporter's own optimizer stays
   off because its "no-op" rules delete constants within 1e-8 of 0 or a relative 1e-5 of 1
   (Adam's eps, LayerNorm's eps, AdamW's `1 - lr * wd`), which turns zero gradients into NaN.
2. `clean_up`: the safe part of that optimizer, run by us: inline local functions, fold
   constants, the rewrite rules minus the no-op and batch-norm-fusion ones, dead-node removal,
   common-subexpression elimination, constants lifted to initializers.
3. `rename_io`: readable names for graph inputs and outputs (`fc1.weight`,
   `fc1.weight.exp_avg`, `fc1.weight.updated`, `loss`); Identity nodes where one value must
   appear under two output names or an output is an input or a constant.
4. `finalize`: IR version 10, onnx.checker, strict shape inference, a check that every
   tensor of the graph has a static shape, and CastLike written as Cast (`cast_like_to_cast`).
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import onnx
from onnx import helper, inliner, shape_inference

from planner.errors import ModelCheckError
from planner.export._deps import require, require_torch

torch = require_torch()

#: The opset the training graphs are written in (torch's exporter translates natively from 18).
OPSET = 18
#: onnxruntime 1.31 accepts IR versions up to 13; 10 is what `onnx` 1.16+ tools all read.
IR_VERSION = 10
#: Constant folding keeps results up to this many elements.
FOLD_OUTPUT_LIMIT = 1024


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Silence the exporter's progress prints and its warnings about absent torchvision."""
    loggers = [logging.getLogger(name) for name in ("torch.onnx", "torch.export", "onnxscript")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


def export_fx(graph_module: Any, flat_args: Sequence[Any]) -> Any:
    """torch.onnx.export of the traced step; returns the onnx_ir Model, unoptimized."""
    with quiet():
        program = torch.onnx.export(
            graph_module,
            tuple(flat_args),
            dynamo=True,
            optimize=False,
            opset_version=OPSET,
            verbose=False,
            external_data=False,
        )
    return program.model


def _safe_rewrite_rules() -> list[Any]:
    """onnxscript's default rewrite rules without the ones that are wrong for training graphs."""
    try:
        from onnxscript import rewriter
        from onnxscript.rewriter.rules.common import _fuse_batchnorm, _no_op
    except ImportError:  # another onnxscript layout: fold constants only
        return []
    unsafe = {id(rule) for rule in (*_no_op.rules, *_fuse_batchnorm.rules)}
    return [rule for rule in rewriter._DEFAULT_REWRITE_RULES if id(rule) not in unsafe]


def clean_up(model_ir: Any) -> None:
    """Inline, fold constants, apply the safe rewrite rules and tidy up, in place."""
    ir = require("onnx_ir")
    common = require("onnx_ir.passes.common")
    from onnxscript.optimizer import fold_constants_ir

    common.InlinePass()(model_ir)
    rules = _safe_rewrite_rules()
    for _ in range(2):
        # Large constants (zero tensors of activation size) stay ConstantOfShape/Expand nodes
        # instead of being folded into initializers that would bloat the file.
        fold_constants_ir(model_ir, output_size_limit=FOLD_OUTPUT_LIMIT)
        if rules:
            from onnxscript.rewriter import RewritePass

            RewritePass(rules)(model_ir)
        common.RemoveUnusedNodesPass()(model_ir)
    ir.passes.Sequential(
        common.RemoveUnusedFunctionsPass(),
        common.RemoveUnusedOpsetsPass(),
        common.LiftConstantsToInitializersPass(lift_all_constants=True, size_limit=0),
        common.DeduplicateInitializersPass(),
        common.CommonSubexpressionEliminationPass(),
        common.RemoveUnusedNodesPass(),
    )(model_ir)


def serialize(model_ir: Any) -> onnx.ModelProto:
    ir = require("onnx_ir")
    return ir.serde.serialize_model(model_ir)


def _all_value_names(graph: onnx.GraphProto) -> set[str]:
    names = {v.name for v in graph.input} | {v.name for v in graph.output}
    names |= {t.name for t in graph.initializer}
    for node in graph.node:
        names.update(n for n in node.input if n)
        names.update(n for n in node.output if n)
    return names


def _apply_renames(graph: onnx.GraphProto, mapping: dict[str, str]) -> None:
    """Rename values simultaneously (so swaps are fine) everywhere in the flat graph."""
    for node in graph.node:
        for i, name in enumerate(node.input):
            if name in mapping:
                node.input[i] = mapping[name]
        for i, name in enumerate(node.output):
            if name in mapping:
                node.output[i] = mapping[name]
    for collection in (graph.input, graph.output, graph.value_info, graph.initializer):
        for value in collection:
            if value.name in mapping:
                value.name = mapping[value.name]


def rename_io(
    model: onnx.ModelProto, input_names: Sequence[str], output_names: Sequence[str]
) -> None:
    """Give the graph inputs and outputs the given names (positionally), in place."""
    graph = model.graph
    if len(graph.input) != len(input_names) or len(graph.output) != len(output_names):
        raise RuntimeError(
            f"exported graph has {len(graph.input)} inputs / {len(graph.output)} outputs, "
            f"expected {len(input_names)} / {len(output_names)}"
        )
    targets = set(input_names) | set(output_names)
    if len(targets) != len(input_names) + len(output_names):
        raise RuntimeError("graph input/output names are not unique")
    # Outputs that are graph inputs, initializers or repeated get an Identity of their own.
    used = _all_value_names(graph)
    special = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    seen: set[str] = set()
    for i, out in enumerate(graph.output):
        if out.name in special or out.name in seen:
            fresh = f"__output_copy_{i}"
            graph.node.append(helper.make_node("Identity", [out.name], [fresh]))
            out.name = fresh
            used.add(fresh)
        seen.add(out.name)
    mapping = {v.name: new for v, new in zip(graph.input, input_names, strict=True)}
    mapping.update({v.name: new for v, new in zip(graph.output, output_names, strict=True)})
    # Intermediate values whose names we are about to hand out move out of the way.
    for name in sorted(used & targets):
        if name not in mapping:
            fresh = f"{name}__internal"
            while fresh in used or fresh in targets:
                fresh += "_"
            mapping[name] = fresh
            used.add(fresh)
    _apply_renames(graph, mapping)


def finalize(model: onnx.ModelProto) -> onnx.ModelProto:
    """IR version 10, checker, strict shape inference, static shapes everywhere."""
    model.ir_version = IR_VERSION
    for node in model.graph.node:
        # The exporter's per-node provenance (FX node, stack trace) is most of the file size.
        del node.metadata_props[:]
        node.doc_string = ""
    if model.functions:
        model = inliner.inline_local_functions(model)
    del model.graph.value_info[:]
    try:
        onnx.checker.check_model(model, full_check=False)
        inferred = shape_inference.infer_shapes(
            model, check_type=True, strict_mode=True, data_prop=True
        )
    except (onnx.checker.ValidationError, shape_inference.InferenceError) as exc:
        raise ModelCheckError(f"the exported training graph is invalid: {exc}") from exc
    known = {v.name: v for v in (*inferred.graph.value_info, *inferred.graph.input,
                                  *inferred.graph.output)}
    for node in inferred.graph.node:
        for name in node.output:
            value = known.get(name)
            if value is None or not _is_static(value.type):
                raise ModelCheckError(
                    f"tensor {name!r} (output of {node.op_type} {node.name!r}) has no static "
                    "shape after shape inference"
                )
    cast_like_to_cast(inferred)
    return inferred


def cast_like_to_cast(model: onnx.ModelProto) -> int:
    """Replace every CastLike by a Cast to its (statically known) target type, in place.

    ONNX Runtime has no kernel for CastLike and expands it into its function body when a session
    is created; the expanded nodes get new, larger node indices, so they and everything that
    waits for them run after nodes planned later (runtime/segments.py relies on index order).
    A Cast says the same with one native op. Returns how many were replaced.
    """
    graph = model.graph
    types = {v.name: v.type.tensor_type.elem_type
             for v in (*graph.value_info, *graph.input, *graph.output)}
    types.update({t.name: t.data_type for t in graph.initializer})
    replaced = 0
    for node in graph.node:
        if node.op_type != "CastLike" or node.domain not in ("", "ai.onnx"):
            continue
        target = types.get(node.input[1])
        if not target:
            continue
        del node.input[1:]
        del node.attribute[:]
        node.op_type = "Cast"
        node.attribute.append(helper.make_attribute("to", target))
        replaced += 1
    return replaced


def _is_static(type_proto: onnx.TypeProto) -> bool:
    if not type_proto.HasField("tensor_type"):
        return False
    tensor = type_proto.tensor_type
    if not tensor.HasField("shape"):
        return False
    return all(d.HasField("dim_value") for d in tensor.shape.dim)
