"""Backward of nearest and (bi/tri)linear upsampling as matrix products ONNX can express.

Torch ships no decomposition for `aten.upsample_*_backward`. Both interpolations are separable
linear maps: along each spatial axis, output index o reads input indices with fixed weights.
So the forward is `x ×_d A_d` for one [out_d, in_d] matrix per axis, and the gradient is the
transposed map, `grad_out ×_d A_d^T`: one MatMul per axis with a constant matrix. The index and
weight arithmetic follows torch's CPU kernels (UpSample.h), in float32 as they do, so that the
matrices pick the same input cells as the forward pass (float32, or float64 for double tensors:
torch computes in the tensor's accumulation type).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from planner.export._deps import require_torch

if TYPE_CHECKING:  # torch is imported at run time through require_torch (the optional extra)
    from torch import Tensor

torch = require_torch()
aten = torch.ops.aten

Matrix = list[list[float]]


def _scale(in_size: int, out_size: int, scale: float | None, real: type) -> Any:
    """torch's compute_scales_value: 1/scale_factor when one was given, else in/out."""
    if scale is not None and scale > 0:
        return real(1.0 / scale)
    return real(in_size) / real(out_size)


def nearest_matrix(in_size: int, out_size: int, scale: float | None, exact: bool,
                   real: type = np.float32) -> Matrix:
    """[out, in]: output o copies input floor((o + offset) * scale), offset 0.5 for "exact"."""
    step = _scale(in_size, out_size, scale, real)
    offset = real(0.5 if exact else 0.0)
    rows = []
    for o in range(out_size):
        if out_size == in_size:
            src = o
        else:
            src = min(int(math.floor((real(o) + offset) * step)), in_size - 1)
        row = [0.0] * in_size
        row[src] = 1.0
        rows.append(row)
    return rows


def linear_matrix(in_size: int, out_size: int, align_corners: bool, scale: float | None,
                  real: type = np.float32) -> Matrix:
    """[out, in]: output o mixes inputs i0 and i0 + 1 with torch's linear weights."""
    if align_corners:
        step = real(in_size - 1) / real(out_size - 1) if out_size > 1 else real(0.0)
    else:
        step = _scale(in_size, out_size, scale, real)
    rows = []
    for o in range(out_size):
        if align_corners:
            src = step * real(o)
        else:
            src = max(step * (real(o) + real(0.5)) - real(0.5), real(0.0))
        i0 = int(src)
        i1 = i0 + (1 if i0 < in_size - 1 else 0)
        weight1 = float(min(max(src - real(i0), real(0.0)), real(1.0)))
        row = [0.0] * in_size
        row[i0] += 1.0 - weight1
        row[i1] += weight1
        rows.append(row)
    return rows


def _real(grad_out: Tensor) -> type:
    """The float type torch's kernel computes indices and weights in for this tensor."""
    return np.float64 if grad_out.dtype == torch.float64 else np.float32


def _apply_transposed(grad_out: Tensor, matrices: Sequence[Matrix]) -> Tensor:
    """grad_out ×_d A_d^T over the trailing spatial axes."""
    nd = len(matrices)
    grad = grad_out
    for d, rows in enumerate(matrices):
        axis = grad.dim() - nd + d
        a = torch.tensor(rows, dtype=grad.dtype)  # [out, in]
        grad = torch.matmul(grad.movedim(axis, -1), a).movedim(-1, axis)
    return grad


def _split_scales(args: Sequence[Any], nd: int) -> list[float | None]:
    scales = list(args) + [None] * (nd - len(args))
    return scales[:nd]


def _upsample_backward(nd: int, mode: str) -> Callable[..., Tensor]:
    """The backward op of `mode` ("nearest", "nearest-exact" or "linear", whose op takes
    align_corners before the scales) over `nd` spatial axes."""

    def backward(grad_out: Tensor, output_size: Sequence[int], input_size: Sequence[int],
                 *rest: Any) -> Tensor:
        align_corners = bool(rest[0]) if mode == "linear" else False
        scales = _split_scales(rest[1:] if mode == "linear" else rest, nd)
        real = _real(grad_out)
        matrices = [
            linear_matrix(i, o, align_corners, s, real) if mode == "linear"
            else nearest_matrix(i, o, s, mode == "nearest-exact", real)
            for i, o, s in zip(list(input_size)[-nd:], output_size, scales, strict=True)
        ]
        return _apply_transposed(grad_out, matrices)

    return backward


def upsample_backward_decompositions() -> dict[Any, Callable[..., Tensor]]:
    """Every nearest / nearest-exact / linear upsampling backward op of 1, 2 and 3 dims."""
    table: dict[Any, Callable[..., Tensor]] = {}
    for nd, linear_name in ((1, "upsample_linear1d"), (2, "upsample_bilinear2d"),
                            (3, "upsample_trilinear3d")):
        table[getattr(aten, f"{linear_name}_backward").default] = _upsample_backward(nd, "linear")
        table[getattr(aten, f"upsample_nearest{nd}d_backward").default] = (
            _upsample_backward(nd, "nearest"))
        table[getattr(aten, f"_upsample_nearest_exact{nd}d_backward").default] = (
            _upsample_backward(nd, "nearest-exact"))
    return table
