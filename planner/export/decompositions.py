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

import math
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
# How many times the general form's work a strided weight gradient made in the weight's layout
# may take (see _weight_grad_in_weight_layout).
WEIGHT_LAYOUT_WORK = 4


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
    if (groups == 1 and all(d == 1 for d in dilation)
            and math.prod(kernel) * inp.shape[1] * grad_out.shape[1]
            > inp.numel() + grad_out.numel()):
        in_layout = _weight_grad_in_weight_layout(inp, grad_out, kernel, stride, padding)
        if in_layout is not None:
            return in_layout
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


def _weight_grad_in_weight_layout(inp: Tensor, grad_out: Tensor, kernel: Sequence[int],
                                  stride: Sequence[int], padding: Sequence[int]
                                  ) -> Tensor | None:
    """`_conv_weight_grad` of an undilated, ungrouped convolution made in the weight's own
    layout [Cout, Cin, *kernel], or None where neither form below applies.

    The general form makes [Cin, Cout, *kernel] and transposes it: a weight-sized copy beside
    the gradient itself, which on VGG-11's and ResNet-18's 512-channel layers (9.4 MB each) set
    the op-footprint bound. With both operands flipped spatially (p: padding, s: stride),
    dL/dw[o, c, k] = sum_n sum_i grad_out[n, o, i] * inp[n, c, s*i + k - p] becomes:

    - stride 1: a convolution of the flipped output gradient, batch and channels swapped
      ([Cout, N, *S']), with the flipped input as its weight ([Cin, N, *S]), padded by
      kernel - 1 - p: the same work as the general form;
    - any stride: a transposed convolution of the flipped, swapped output gradient with the
      input as its weight ([N, Cin, *S] as the convolution reads it: padded by p, cut to the
      extent s*(S'-1) + kernel it reaches), stride s, padding s*(S'-1). It multiplies every
      input position with every output gradient position, (that extent / kernel) times the
      work: used up to WEIGHT_LAYOUT_WORK times (ResNet-18's last stride-2 layer: 2.8x).

    Either output has the kernel's extent and the weight's layout. The flips and transposes copy
    the activations instead (the caller picks this only when they are smaller than the weight).
    """
    nd = inp.dim() - 2
    axes = list(range(2, 2 + nd))
    g = grad_out.flip(axes).transpose(0, 1)
    if all(s == 1 for s in stride):
        pads = [k - 1 - p for k, p in zip(kernel, padding, strict=True)]
        return aten.convolution(g, inp.flip(axes).transpose(0, 1), None, [1] * nd, pads,
                                [1] * nd, False, [0] * nd, 1)
    spans = [s * (o - 1) for s, o in zip(stride, grad_out.shape[2:], strict=True)]
    reach = [span + k for span, k in zip(spans, kernel, strict=True)]
    if math.prod(reach) > WEIGHT_LAYOUT_WORK * math.prod(kernel):
        return None
    # torch.nn.functional.pad's order: the last axis first, (before, after) each
    x = aten.constant_pad_nd(inp, [q for p in reversed(padding) for q in (p, p)], 0.0)
    for d, extent in enumerate(reach):  # never above the padded input's: s*(S'-1) + k <= S + 2p
        if extent < x.shape[2 + d]:
            x = x.narrow(2 + d, 0, extent)
    return aten.convolution(g, x, None, list(stride), spans, [1] * nd, True, [0] * nd, 1)


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
