"""The training step as one function of flat tensors, and its trace into ATen ops.

`step(*data, *labels, *params, *frozen, *buffers, *state[, adam_step])` returns
`(loss, *updated params, *updated mutated buffers, *updated state[, adam_step + 1])`:
`torch.func.grad_and_value` over `functional_call(model, ...)` gives the loss and the gradients,
then the functional optimizer update of planner.export.optimizers runs on them. Buffers are
cloned before the forward pass (batch norm updates its running statistics in place) and passed
into the differentiated function as a non-differentiated argument, so the in-place update is
captured instead of being refused as a mutation of a closed-over tensor.

`make_fx` with the training decomposition table turns that function into an FX graph of ATen
ops that the ONNX exporter can translate op by op. It traces inside `tracing_context()`: the math
backend for scaled dot-product attention and no mkldnn kernels, so that attention and LSTM / GRU
/ RNN layers are recorded as matmuls and elementwise ops (recurrences unrolled over the
sequence) whose gradients autograd writes op by op; the fused kernels they replace have
backward ops without ONNX translation.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from planner.export._deps import require_torch
from planner.export.optimizers import apply_update
from planner.export.spec import ADAM_STEP_NAME, LOSS_OUTPUT_NAME, UPDATED_SUFFIX, OptimizerSpec

torch = require_torch()


@dataclass
class StepLayout:
    """Names of the step's flat inputs and outputs, grouped by role, in graph order."""

    data: list[str]
    labels: list[str]
    params: list[str]
    frozen: list[str] = field(default_factory=list)
    buffers: list[str] = field(default_factory=list)
    mutated_buffers: list[str] = field(default_factory=list)
    state: list[str] = field(default_factory=list)
    step: str | None = None

    def input_kinds(self) -> dict[str, str]:
        kinds: dict[str, str] = {}
        for names, kind in (
            (self.data, "data"),
            (self.labels, "label"),
            (self.params, "parameter"),
            (self.frozen, "parameter"),
            (self.buffers, "buffer"),
            (self.state, "optimizer_state"),
            ([self.step] if self.step else [], "optimizer_state"),
        ):
            for name in names:
                kinds[name] = kind
        return kinds

    def input_names(self) -> list[str]:
        return list(self.input_kinds())

    def updated_inputs(self) -> list[str]:
        return [*self.params, *self.mutated_buffers, *self.state,
                *([self.step] if self.step else [])]

    def updates(self) -> dict[str, str]:
        return {name: name + UPDATED_SUFFIX for name in self.updated_inputs()}

    def output_names(self) -> list[str]:
        return [LOSS_OUTPUT_NAME, *self.updates().values()]

    def all_names_unique(self) -> bool:
        names = [*self.input_names(), *self.output_names()]
        return len(names) == len(set(names))


def make_layout(
    n_data: int,
    n_labels: int,
    params: Sequence[str],
    frozen: Sequence[str],
    buffers: Sequence[str],
    mutated_buffers: Sequence[str],
    spec: OptimizerSpec,
) -> StepLayout:
    data = ["input"] if n_data == 1 else [f"input.{i}" for i in range(n_data)]
    labels = ["label"] if n_labels == 1 else [f"label.{i}" for i in range(n_labels)]
    state = [f"{p}.{suffix}" for p in params for suffix in spec.state_suffixes()]
    return StepLayout(
        data=data,
        labels=labels,
        params=list(params),
        frozen=list(frozen),
        buffers=list(buffers),
        mutated_buffers=list(mutated_buffers),
        state=state,
        step=ADAM_STEP_NAME if spec.is_adam else None,
    )


def build_step(
    model: Any,
    loss_fn: Callable[..., Any],
    spec: OptimizerSpec,
    layout: StepLayout,
) -> Callable[..., tuple[Any, ...]]:
    """The training step as a function of the flat inputs of `layout` (see module doc)."""
    from torch.func import functional_call, grad_and_value

    counts = [len(layout.data), len(layout.labels), len(layout.params), len(layout.frozen),
              len(layout.buffers), len(layout.state), 1 if layout.step else 0]
    mutated_index = [layout.buffers.index(name) for name in layout.mutated_buffers]

    def step(*flat: Any) -> tuple[Any, ...]:
        groups = []
        start = 0
        for count in counts:
            groups.append(list(flat[start:start + count]))
            start += count
        data, labels, params, frozen, buffers, state, step_counter = groups
        buffers = [b.clone() for b in buffers]
        fixed = dict(zip(layout.frozen, frozen, strict=True))

        def loss_of(trainable: list[Any], bufs: list[Any]) -> Any:
            tensors = {**dict(zip(layout.params, trainable, strict=True)), **fixed,
                       **dict(zip(layout.buffers, bufs, strict=True))}
            output = functional_call(model, tensors, tuple(data))
            return loss_fn(output, *labels)

        grads, loss = grad_and_value(loss_of)(params, buffers)
        new_params, new_state, new_step = apply_update(
            spec, params, grads, state, step_counter[0] if step_counter else None
        )
        outputs = [loss, *new_params, *(buffers[i] for i in mutated_index), *new_state]
        if new_step is not None:
            outputs.append(new_step)
        return tuple(outputs)

    return step


@contextlib.contextmanager
def tracing_context() -> Iterator[None]:
    """Math attention and no mkldnn RNN kernels while the step runs (see module doc)."""
    from planner.export.attention import math_attention

    with warnings.catch_warnings():
        # Toggling mkldnn warns that oneDNN TF32 needs an Intel GPU: irrelevant here.
        warnings.filterwarnings("ignore", message=".*TF32.*")
        with math_attention(), torch.backends.mkldnn.flags(enabled=False):
            yield


def trace_step(step: Callable[..., Any], flat_args: Sequence[Any]) -> Any:
    """make_fx of the step with the training decomposition table: an FX GraphModule."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from planner.export.decompositions import training_decomposition_table

    with tracing_context():
        return make_fx(step, decomposition_table=training_decomposition_table())(*flat_args)
