"""Functional optimizer updates, written op for op after torch.optim's single-tensor code paths.

Each update takes the parameters, their gradients and the optimizer state as tensors and returns
new tensors (nothing is mutated), so tracing it puts the update into the training graph. The
hyper-parameters are Python floats: they become graph constants. Adam's step counter is a state
tensor (float32 scalar, like torch's `state["step"]`) so that consecutive runs of the graph
apply the right bias correction.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from planner.export._deps import require_torch
from planner.export.spec import OptimizerSpec

if TYPE_CHECKING:  # torch is imported at run time through require_torch (the optional extra)
    from torch import Tensor

torch = require_torch()


def initial_state(spec: OptimizerSpec, params: list[Tensor]) -> tuple[list[Tensor], Tensor | None]:
    """Fresh optimizer state: per-parameter tensors (zeros, in `state_suffixes` order, parameter
    major) and Adam's step counter (0.0) or None."""
    per_param = [torch.zeros_like(p) for p in params for _ in spec.state_suffixes()]
    step = torch.zeros((), dtype=torch.float32) if spec.is_adam else None
    return per_param, step


def apply_update(
    spec: OptimizerSpec,
    params: list[Tensor],
    grads: list[Tensor],
    state: list[Tensor],
    step: Tensor | None,
) -> tuple[list[Tensor], list[Tensor], Tensor | None]:
    """One optimizer step. Returns (new params, new per-parameter state, new step counter)."""
    if spec.name == "sgd":
        return [_sgd(spec, p, g) for p, g in zip(params, grads, strict=True)], [], None
    if spec.name == "momentum":
        new_params, new_state = [], []
        for p, g, buf in zip(params, grads, state, strict=True):
            p2, buf2 = _momentum(spec, p, g, buf)
            new_params.append(p2)
            new_state.append(buf2)
        return new_params, new_state, None
    assert step is not None
    new_step = step + 1.0
    new_params, new_state = [], []
    for i, (p, g) in enumerate(zip(params, grads, strict=True)):
        p2, m2, v2 = _adam(spec, p, g, state[2 * i], state[2 * i + 1], new_step)
        new_params.append(p2)
        new_state.extend((m2, v2))
    return new_params, new_state, new_step


def _sgd(spec: OptimizerSpec, p: Tensor, g: Tensor) -> Tensor:
    wd = spec.effective_weight_decay
    if wd:
        g = g + wd * p
    return p - spec.lr * g


def _momentum(spec: OptimizerSpec, p: Tensor, g: Tensor, buf: Tensor) -> tuple[Tensor, Tensor]:
    # torch starts the buffer at the first gradient; a zero buffer gives the same first step
    # when dampening is 0 (momentum * 0 + g).
    wd = spec.effective_weight_decay
    if wd:
        g = g + wd * p
    buf = spec.momentum * buf + (1.0 - spec.dampening) * g
    direction = g + spec.momentum * buf if spec.nesterov else buf
    return p - spec.lr * direction, buf


def _adam(
    spec: OptimizerSpec, p: Tensor, g: Tensor, m: Tensor, v: Tensor, step: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    beta1, beta2 = spec.betas
    wd = spec.effective_weight_decay
    if wd:
        if spec.name == "adamw":
            p = p * (1.0 - spec.lr * wd)
        else:
            g = g + wd * p
    m = m + (1.0 - beta1) * (g - m)  # torch: exp_avg.lerp_(grad, 1 - beta1)
    v = beta2 * v + (1.0 - beta2) * (g * g)
    bias_correction1 = 1.0 - torch.pow(beta1, step)
    bias_correction2_sqrt = torch.sqrt(1.0 - torch.pow(beta2, step))
    step_size = spec.lr / bias_correction1
    # The `+ eps` must survive export: without it a zero gradient gives 0/0 = NaN.
    denom = torch.sqrt(v) / bias_correction2_sqrt + spec.eps
    return p - step_size * (m / denom), m, v
