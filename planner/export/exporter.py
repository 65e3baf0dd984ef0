"""`export_training_graph`: a torch module, a loss and an optimizer in; one ONNX training step out.

Steps: prepare a private copy of the module (training mode, in-place activations off; dropout
stays, its masks are drawn inside the graph by seeded random ops, planner.export.randomness),
run it once eagerly to learn which buffers the forward pass mutates and that the loss is a
scalar, trace the functional training step (planner.export.trace), export and clean the ONNX
graph (planner.export.onnx_graph), fold 2-D transposes into the matrix products that read or
make them (planner.export.transposes), then verify it against an eager torch step
(planner.export.verify).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from planner.errors import InvalidInputError
from planner.export._deps import require_torch
from planner.export.spec import ExportResult, OptimizerSpec

torch = require_torch()
nn = torch.nn

DEFAULT_TOLERANCE = 1e-3


class ExportFailedError(InvalidInputError):
    """The model could not be turned into a correct ONNX training graph."""


def prepare_module(model: Any) -> Any:
    """A private copy in training mode with every `inplace` flag off (functional transforms and
    export want out-of-place ops)."""
    if not isinstance(model, nn.Module):
        raise InvalidInputError(f"expected a torch.nn.Module, got {type(model).__name__}")
    work = copy.deepcopy(model)
    for module in work.modules():
        if isinstance(getattr(module, "inplace", None), bool):
            module.inplace = False
    work.train()
    return work


def _as_tensor_tuple(values: Any, what: str) -> tuple[Any, ...]:
    if isinstance(values, torch.Tensor):
        values = (values,)
    if not isinstance(values, (tuple, list)) or not values:
        raise InvalidInputError(f"{what} must be a tensor or a non-empty tuple of tensors")
    for value in values:
        if not isinstance(value, torch.Tensor):
            raise InvalidInputError(f"{what} must hold tensors, got {type(value).__name__}")
    return tuple(v.detach().clone().contiguous() for v in values)


def _written_storages() -> Any:
    """A dispatch mode that records the storage of every tensor an op writes to."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class MutationRecorder(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.written: set[int] = set()

        def __torch_dispatch__(
            self, func: Any, types: Sequence[type], args: Sequence[Any] = (),
            kwargs: dict[str, Any] | None = None,
        ) -> Any:
            kwargs = kwargs or {}
            for i, argument in enumerate(func._schema.arguments):
                alias = argument.alias_info
                if alias is None or not alias.is_write:
                    continue
                value = args[i] if i < len(args) else kwargs.get(argument.name)
                if isinstance(value, torch.Tensor):
                    self.written.add(value.untyped_storage().data_ptr())
            return func(*args, **kwargs)

    return MutationRecorder()


def _dry_run(
    work: Any, inputs: Sequence[Any], labels: Sequence[Any], loss_fn: Callable[..., Any],
    buffer_names: list[str],
) -> list[str]:
    """Run forward + loss once on clones of the buffers; return the buffers it wrote to."""
    from torch.func import functional_call

    originals = {name: b.detach().clone() for name, b in work.named_buffers()}
    clones = {name: b.clone() for name, b in originals.items()}
    recorder = _written_storages()
    try:
        with torch.no_grad(), recorder:
            loss = loss_fn(functional_call(work, clones, tuple(inputs)), *labels)
    except Exception as exc:  # noqa: BLE001 - any failure here is the caller's model/data
        raise InvalidInputError(
            f"the model or loss failed on the example inputs: {type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1 or loss.dim() != 0:
        raise InvalidInputError("the loss function must return a scalar tensor")
    if not loss.dtype.is_floating_point:
        raise InvalidInputError(f"the loss must be a floating-point tensor, got {loss.dtype}")
    mutated = []
    for name in buffer_names:
        clone = clones[name]
        written = clone.numel() > 0 and clone.untyped_storage().data_ptr() in recorder.written
        if written or not torch.equal(clone, originals[name]):
            mutated.append(name)
    return mutated


def _to_numpy(t: Any) -> np.ndarray:
    return t.detach().cpu().numpy().copy()


def export_training_graph(
    model: Any,
    example_inputs: tuple[Any, ...] | Any,
    example_labels: tuple[Any, ...] | Any,
    loss_fn: Callable[..., Any] | str,
    optimizer: OptimizerSpec,
    *,
    tolerance: float | None = DEFAULT_TOLERANCE,
) -> ExportResult:
    """Export one training step (forward + backward + optimizer update) as a flat ONNX graph.

    model: an nn.Module (not modified: a copy is traced, in training mode; dropout masks are
        drawn inside the graph and verification replays them in torch).
    example_inputs: the positional inputs of `model(...)`; their shapes are baked in.
    example_labels: what `loss_fn(model_output, *labels)` takes besides the output.
    loss_fn: a callable returning a scalar, or a name from planner.export.losses.
    optimizer: which update the graph applies, with its hyper-parameters.
    tolerance: raise ExportFailedError when onnxruntime and torch differ by more than this
        (loss or any compared update); None only measures.

    Graph inputs, in order: data (`input` / `input.<i>`), labels (`label` / `label.<i>`),
    parameters (their torch names), buffers, optimizer state (`<param>.momentum_buffer`,
    `<param>.exp_avg`, `<param>.exp_avg_sq`, `optimizer.step`). Outputs: `loss`, then
    `<name>.updated` for every parameter, mutated buffer and state tensor.
    """
    from planner.export import onnx_graph
    from planner.export.losses import loss_by_name
    from planner.export.optimizers import initial_state
    from planner.export.randomness import seed_random_nodes
    from planner.export.trace import build_step, make_layout, trace_step
    from planner.export.transposes import fold_transposes
    from planner.export.unsupported import missing_ops_message, short_reason, untranslatable_ops
    from planner.export.verify import compare_with_torch

    if not isinstance(optimizer, OptimizerSpec):
        raise InvalidInputError("optimizer must be a planner.export.OptimizerSpec")
    if isinstance(loss_fn, str):
        loss_fn = loss_by_name(loss_fn)
    inputs = _as_tensor_tuple(example_inputs, "example_inputs")
    labels = _as_tensor_tuple(example_labels, "example_labels")
    work = prepare_module(model)

    named_params = list(work.named_parameters())
    trainable = [(n, p) for n, p in named_params if p.requires_grad]
    frozen = [(n, p) for n, p in named_params if not p.requires_grad]
    if not trainable:
        raise InvalidInputError("the model has no trainable parameters")
    for name, p in named_params:
        if not p.dtype.is_floating_point:
            raise InvalidInputError(f"parameter {name} is {p.dtype}; only float is supported")
    buffers = list(work.named_buffers())
    buffer_names = [n for n, _ in buffers]
    mutated = _dry_run(work, inputs, labels, loss_fn, buffer_names)
    layout = make_layout(len(inputs), len(labels), [n for n, _ in trainable],
                         [n for n, _ in frozen], buffer_names, mutated, optimizer)
    if not layout.all_names_unique():
        raise InvalidInputError(
            "a parameter or buffer name collides with the graph's input/output names "
            "(input, label, loss, optimizer.step, *.updated): rename it"
        )
    state, step = initial_state(optimizer, [p.detach() for _, p in trainable])
    flat = [*inputs, *labels, *(p.detach().clone() for _, p in trainable),
            *(p.detach().clone() for _, p in frozen), *(b.detach().clone() for _, b in buffers),
            *state, *([step] if step is not None else [])]
    names = layout.input_names()
    feeds = {name: _to_numpy(t) for name, t in zip(names, flat, strict=True)}

    step_fn = build_step(work, loss_fn, optimizer, layout)
    try:
        graph_module = trace_step(step_fn, flat)
    except InvalidInputError:
        raise
    except Exception as exc:  # noqa: BLE001 - torch failures here are about the model
        raise ExportFailedError(
            f"tracing the training step failed: {short_reason(exc)}") from exc
    missing = untranslatable_ops(graph_module)
    if missing:
        raise ExportFailedError(missing_ops_message(missing, work, inputs))
    try:
        model_ir = onnx_graph.export_fx(graph_module, flat)
        onnx_graph.clean_up(model_ir)
        proto = onnx_graph.serialize(model_ir)
    except Exception as exc:  # noqa: BLE001 - torch/onnxscript failures are about the model
        raise ExportFailedError(
            f"ONNX export of the training step failed: {short_reason(exc)}") from exc
    onnx_graph.rename_io(proto, names, layout.output_names())
    proto.graph.name = type(model).__name__
    seed_random_nodes(proto)
    proto = onnx_graph.finalize(proto)
    if fold_transposes(proto):
        proto = onnx_graph.finalize(proto)

    comparison = compare_with_torch(proto, work, loss_fn, optimizer, layout, feeds)
    result = ExportResult(
        model=proto,
        input_kinds=layout.input_kinds(),
        updates=layout.updates(),
        loss_output=layout.output_names()[0],
        feeds=feeds,
        optimizer=optimizer,
        reference_loss=comparison.reference_loss,
        torch_parameter_count=sum(p.numel() for p in model.parameters()),
        max_abs_diff_loss=comparison.max_abs_diff_loss,
        max_abs_diff_updates=comparison.max_abs_diff_updates,
        update_diffs=comparison.update_diffs,
        adam_raw_parameter_diff=comparison.adam_raw_parameter_diff,
        verifier=lambda other: compare_with_torch(proto, work, loss_fn, optimizer, layout, other),
    )
    if tolerance is not None:
        worst = max(result.max_abs_diff_loss, result.max_abs_diff_updates)
        if not worst <= tolerance:  # also catches NaN
            bad = sorted(result.update_diffs.items(),
                         key=lambda kv: -np.nan_to_num(kv[1], nan=np.inf))
            raise ExportFailedError(
                f"the exported graph does not match torch: loss diff "
                f"{result.max_abs_diff_loss:.3g}, worst updates {bad[:3]} (tolerance "
                f"{tolerance:g})"
            )
    return result
