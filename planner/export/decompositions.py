"""The decomposition table that turns a traced training step into ops ONNX can express.

`make_fx` applies it while tracing, so the graph handed to the ONNX exporter holds no backward
kernels and no fused training-mode normalizations:

- torch's core ATen decompositions;
- every `*_backward` decomposition torch ships (softmax, gelu, layer norm, max pool, ...);
- the batch-norm and layer-norm decompositions: without them the exporter writes training-mode
  batch norm as inference-mode BatchNormalization, silently wrong (REFERENCES.md);
- our own `aten.convolution_backward` (torch has none): input gradient = the adjoint
  convolution, weight gradient = a convolution of the input with the output gradient with batch
  and channel roles swapped (per group), bias gradient = a sum; transposed convolutions too;
- our own `aten._adaptive_avg_pool2d_backward`: spread each output gradient evenly over its bin;
- `aten.empty_permuted` -> `aten.empty` (only the memory layout differs, which ONNX has not);
- the backward of the fused CPU attention kernel (planner.export.attention), of nearest and
  linear upsampling (planner.export.resampling) and of 3-D average and max pooling
  (planner.export.pooling).

Attention and recurrent layers also need the tracing context of planner.export.trace (math
attention backend, no mkldnn RNN kernels): their fused kernels are picked above the level where
this table applies.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from planner.export._deps import require_torch
from planner.export.attention import attention_decompositions
from planner.export.pooling import pooling_decompositions
from planner.export.resampling import upsample_backward_decompositions

if TYPE_CHECKING:  # torch is imported at run time through require_torch (the optional extra)
    from torch import Tensor

torch = require_torch()
aten = torch.ops.aten


def _conv_weight_grad(
    inp: Tensor,
    grad_out: Tensor,
    kernel: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    groups: int,
) -> Tensor:
    """Gradient of `y = conv(inp, w)` w.r.t. `w` of shape [Cout, Cin/groups, *kernel].

    dL/dw[o, c, k] = sum_n sum_j inp[n, c, j*stride - padding + k*dilation] * grad_out[n, o, j]:
    a convolution over the spatial axes in which the batch plays the channel role, with stride
    and dilation exchanged. Groups are kept apart by folding them into the channel axis.
    """
    n = inp.shape[0]
    spatial = list(inp.shape[2:])
    out_spatial = list(grad_out.shape[2:])
    nd = len(spatial)
    cin_g = inp.shape[1] // groups
    cout_g = grad_out.shape[1] // groups
    # [N, G, Cin_g, *S] -> [Cin_g, G, N, *S] -> [Cin_g, G*N, *S]: channel index g*N + n.
    x = inp.reshape(n, groups, cin_g, *spatial).transpose(0, 2).reshape(cin_g, groups * n, *spatial)
    # [N, G, Cout_g, *S'] -> [G, Cout_g, N, *S'] -> [G*Cout_g, N, *S']: weight of groups.
    g = (
        grad_out.reshape(n, groups, cout_g, *out_spatial)
        .permute(1, 2, 0, *range(3, 3 + nd))
        .reshape(groups * cout_g, n, *out_spatial)
    )
    w = aten.convolution(x, g, None, list(dilation), list(padding), list(stride), False,
                         [0] * nd, groups)
    for d in range(nd):
        if w.shape[2 + d] != kernel[d]:
            w = w.narrow(2 + d, 0, kernel[d])
    return w.transpose(0, 1)


def convolution_backward(
    grad_out: Tensor,
    inp: Tensor,
    weight: Tensor,
    bias_sizes: Any,
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    transposed: bool,
    output_padding: Sequence[int],
    groups: int,
    output_mask: Sequence[bool],
) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
    """aten.convolution_backward as plain (transposed) convolutions and a sum."""
    nd = inp.dim() - 2
    kernel = list(weight.shape[2:])
    grad_in = grad_w = grad_b = None
    if output_mask[0]:
        if transposed:
            # A transposed convolution is the adjoint of the convolution with the same weight.
            grad_in = aten.convolution(grad_out, weight, None, list(stride), list(padding),
                                       list(dilation), False, [0] * nd, groups)
        else:
            extra = []
            for d in range(nd):
                covered = ((grad_out.shape[2 + d] - 1) * stride[d] - 2 * padding[d]
                           + dilation[d] * (kernel[d] - 1) + 1)
                extra.append(inp.shape[2 + d] - covered)
            grad_in = aten.convolution(grad_out, weight, None, list(stride), list(padding),
                                       list(dilation), True, extra, groups)
    if output_mask[1]:
        if transposed:
            # y = conv_transpose(x, w) means x's gradient role and y's input role swap.
            grad_w = _conv_weight_grad(grad_out, inp, kernel, stride, padding, dilation, groups)
        else:
            grad_w = _conv_weight_grad(inp, grad_out, kernel, stride, padding, dilation, groups)
    if output_mask[2]:
        grad_b = grad_out.sum([0, *range(2, grad_out.dim())])
    return grad_in, grad_w, grad_b


def _bin_matrix(in_size: int, out_size: int, dtype: Any) -> Tensor:
    """[out, in] matrix with 1/len(bin) where input index i is in output bin o (torch's bins)."""
    rows = []
    for o in range(out_size):
        start = (o * in_size) // out_size
        end = -((-(o + 1) * in_size) // out_size)
        row = [0.0] * in_size
        for i in range(start, end):
            row[i] = 1.0 / (end - start)
        rows.append(row)
    return torch.tensor(rows, dtype=dtype)


def adaptive_avg_pool2d_backward(grad_out: Tensor, inp: Tensor) -> Tensor:
    """aten._adaptive_avg_pool2d_backward: each input cell receives its bins' averaged grads."""
    h, w = inp.shape[-2:]
    oh, ow = grad_out.shape[-2:]
    if oh == 1 and ow == 1:
        return (grad_out / (h * w)).expand(inp.shape).clone()
    ph = _bin_matrix(h, oh, grad_out.dtype)  # [oh, h]
    pw = _bin_matrix(w, ow, grad_out.dtype)  # [ow, w]
    return torch.matmul(torch.matmul(ph.t(), grad_out), pw)


def empty_permuted(
    size: Sequence[int], physical_layout: Sequence[int], **kwargs: Any
) -> Tensor:
    """aten.empty_permuted -> aten.empty: ONNX tensors have no memory layout."""
    kwargs.pop("memory_format", None)
    return aten.empty.memory_format(list(size), **kwargs)


_KEEP_FROM_TORCH = ("backward", "batch_norm", "layer_norm")


def training_decomposition_table() -> dict[Any, Callable[..., Any]]:
    """Core decompositions + torch's backward/normalization ones + ours (see module doc)."""
    from torch._decomp import core_aten_decompositions, decomposition_table

    table: dict[Any, Callable[..., Any]] = dict(core_aten_decompositions())
    for op, fn in decomposition_table.items():
        if any(word in op.name() for word in _KEEP_FROM_TORCH):
            table[op] = fn
    table[aten.convolution_backward.default] = convolution_backward
    table[aten._adaptive_avg_pool2d_backward.default] = adaptive_avg_pool2d_backward
    table[aten.empty_permuted.default] = empty_permuted
    table.update(attention_decompositions())
    table.update(upsample_backward_decompositions())
    table.update(pooling_decompositions())
    return table
