"""Backward of 3-D average and max pooling (torch ships decompositions for 2-D only).

- Average pooling: each input cell receives the gradient of every window that covers it,
  divided by that window's divisor. The divisor of a window is a product of one factor per
  axis (torch's kernel: the window clipped to the padded input, or to the input itself without
  `count_include_pad`, or `divisor_override`), so the scaled gradient is `grad_out / D` with a
  constant D, spread back by a depthwise transposed convolution with a kernel of ones.
- Max pooling: the indices torch saved are flat positions within each (batch, channel) plane,
  so the gradient is a scatter-add of `grad_out` into a zero plane at those positions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from planner.export._deps import require_torch

if TYPE_CHECKING:  # torch is imported at run time through require_torch (the optional extra)
    from torch import Tensor

torch = require_torch()
aten = torch.ops.aten


def _expand(values: Sequence[int] | int, nd: int) -> list[int]:
    values = [values] if isinstance(values, int) else list(values)
    return values * nd if len(values) == 1 else values


def _divisors(in_size: int, out_size: int, kernel: int, stride: int, padding: int,
              count_include_pad: bool) -> list[int]:
    """Per output index along one axis, the window length torch divides by."""
    factors = []
    for o in range(out_size):
        start = o * stride - padding
        end = min(start + kernel, in_size + padding)
        if not count_include_pad:
            start, end = max(start, 0), min(end, in_size)
        factors.append(end - start)
    return factors


def avg_pool3d_backward(
    grad_out: Tensor, inp: Tensor, kernel_size: Sequence[int], stride: Sequence[int],
    padding: Sequence[int], ceil_mode: bool, count_include_pad: bool,
    divisor_override: int | None,
) -> Tensor:
    """aten.avg_pool3d_backward as a division and a depthwise transposed convolution."""
    nd = 3
    kernel = _expand(kernel_size, nd)
    steps = _expand(stride, nd) if stride else kernel
    pads = _expand(padding, nd)
    spatial_in = list(inp.shape[-nd:])
    spatial_out = list(grad_out.shape[-nd:])
    scaled = grad_out
    if divisor_override:
        scaled = grad_out / divisor_override
    else:
        for d in range(nd):
            factors = _divisors(spatial_in[d], spatial_out[d], kernel[d], steps[d], pads[d],
                                count_include_pad)
            shape = [1] * grad_out.dim()
            shape[grad_out.dim() - nd + d] = spatial_out[d]
            scaled = scaled / torch.tensor(factors, dtype=grad_out.dtype).reshape(shape)
    lead = list(grad_out.shape[:-nd])
    planes = scaled.reshape(-1, 1, *spatial_out)
    ones = torch.ones(1, 1, *kernel, dtype=grad_out.dtype)
    spread = aten.convolution(planes, ones, None, steps, [0] * nd, [1] * nd, True, [0] * nd, 1)
    for d in range(nd):  # crop the padding off (and what a ceil-mode window added past it)
        axis = 2 + d
        available = spread.shape[axis] - pads[d]
        if available < spatial_in[d]:
            pad = [0, 0] * (nd - 1 - d) + [0, spatial_in[d] - available]
            spread = torch.nn.functional.pad(spread, pad)
        spread = spread.narrow(axis, pads[d], spatial_in[d])
    return spread.reshape(*lead, *spatial_in)


def max_pool3d_with_indices_backward(
    grad_out: Tensor, inp: Tensor, kernel_size: Sequence[int], stride: Sequence[int],
    padding: Sequence[int], dilation: Sequence[int], ceil_mode: bool, indices: Tensor,
) -> Tensor:
    """aten.max_pool3d_with_indices_backward as a scatter-add into each plane."""
    nd = 3
    lead = list(inp.shape[:-nd])
    spatial_in = list(inp.shape[-nd:])
    flat_grad = grad_out.reshape(*lead, -1)
    flat_index = indices.reshape(*lead, -1)
    zeros = torch.zeros(*lead, math.prod(spatial_in), dtype=grad_out.dtype)
    return zeros.scatter_add(-1, flat_index, flat_grad).reshape(inp.shape)


def pooling_decompositions() -> dict[Any, Any]:
    return {
        aten.avg_pool3d_backward.default: avg_pool3d_backward,
        aten.max_pool3d_with_indices_backward.default: max_pool3d_with_indices_backward,
    }
