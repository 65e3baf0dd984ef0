"""Named loss functions for the command line: `loss_fn(model_output, *labels) -> scalar`.

- `cross_entropy`: F.cross_entropy, classes on axis 1 ([N, C] or per-pixel [N, C, H, W]).
- `sequence_cross_entropy`: classes on the last axis ([B, T, V] logits, [B, T] targets), as
  language models are trained.
- `mse`: F.mse_loss (mean).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from planner.errors import InvalidInputError
from planner.export._deps import require_torch
from planner.export.spec import LOSS_NAMES

torch = require_torch()
F = torch.nn.functional


def cross_entropy(output: Any, labels: Any) -> Any:
    return F.cross_entropy(output, labels)


def sequence_cross_entropy(output: Any, labels: Any) -> Any:
    return F.cross_entropy(output.reshape(-1, output.shape[-1]), labels.reshape(-1))


def mse(output: Any, labels: Any) -> Any:
    return F.mse_loss(output, labels)


LOSSES: dict[str, Callable[..., Any]] = {
    "cross_entropy": cross_entropy,
    "sequence_cross_entropy": sequence_cross_entropy,
    "mse": mse,
}
assert tuple(LOSSES) == LOSS_NAMES


def loss_by_name(name: str) -> Callable[..., Any]:
    try:
        return LOSSES[name]
    except KeyError:
        raise InvalidInputError(
            f"unknown loss {name!r}: use one of {', '.join(LOSSES)}"
        ) from None
