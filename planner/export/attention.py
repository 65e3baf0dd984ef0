"""Scaled dot-product attention in a training graph: math backend, and our own fused backward.

`F.scaled_dot_product_attention` picks a fused kernel on CPU (flash attention for CPU) whose
backward op has no ONNX translation and no torch decomposition. Two measures, both exact up to
float rounding:

- `math_attention()`: the tracer selects the math backend, so the attention is traced as
  matmul, softmax (and dropout) that autograd differentiates op by op. This covers every call
  of `scaled_dot_product_attention`, causal or masked, whatever backend torch would pick.
- `flash_attention_for_cpu_backward`: a decomposition of the fused CPU kernel's backward for
  graphs that still reach it (a model that selects the kernel itself inside forward). With
  P = softmax(Q K^T * scale + mask), dV = P^T dO, dP = dO V^T, dS = P * (dP - rowsum(dO * O))
  and dQ = dS K * scale, dK = dS^T Q * scale. Only without dropout: the kernel's mask cannot
  be recovered from its outputs.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from planner.errors import InvalidInputError
from planner.export._deps import require_torch

if TYPE_CHECKING:  # torch is imported at run time through require_torch (the optional extra)
    from torch import Tensor

torch = require_torch()
aten = torch.ops.aten


@contextlib.contextmanager
def math_attention() -> Iterator[None]:
    """Trace every scaled_dot_product_attention with the math backend."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel([SDPBackend.MATH]):
        yield


def _scores(query: Tensor, key: Tensor, is_causal: bool, attn_mask: Tensor | None,
            scale: float | None) -> Tensor:
    """Q K^T * scale with the causal and the additive / boolean mask applied."""
    factor = scale if scale is not None else 1.0 / math.sqrt(query.shape[-1])
    scores = torch.matmul(query, key.transpose(-2, -1)) * factor
    length, source = query.shape[-2], key.shape[-2]
    if is_causal:
        keep = torch.ones(length, source, dtype=torch.bool).tril()
        scores = scores.masked_fill(keep.logical_not(), float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(attn_mask.logical_not(), float("-inf"))
        else:
            scores = scores + attn_mask
    return scores


def flash_attention_for_cpu_backward(
    grad_out: Tensor, query: Tensor, key: Tensor, value: Tensor, out: Tensor,
    logsumexp: Tensor, dropout_p: float, is_causal: bool, *,
    attn_mask: Tensor | None = None, scale: float | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """aten._scaled_dot_product_flash_attention_for_cpu_backward as matmuls (see module doc)."""
    if dropout_p > 0:
        raise InvalidInputError(
            "the fused CPU attention kernel with dropout cannot be exported; call "
            "scaled_dot_product_attention without selecting a backend (the exporter traces it "
            "with the math backend, where dropout is exported)"
        )
    factor = scale if scale is not None else 1.0 / math.sqrt(query.shape[-1])
    probs = torch.softmax(_scores(query, key, is_causal, attn_mask, scale), dim=-1)
    grad_value = torch.matmul(probs.transpose(-2, -1), grad_out)
    grad_probs = torch.matmul(grad_out, value.transpose(-2, -1))
    row = (grad_out * out).sum(-1, keepdim=True)
    grad_scores = probs * (grad_probs - row)
    grad_query = torch.matmul(grad_scores, key) * factor
    grad_key = torch.matmul(grad_scores.transpose(-2, -1), query) * factor
    return grad_query, grad_key, grad_value


def attention_decompositions() -> dict[Any, Callable[..., Any]]:
    return {
        aten._scaled_dot_product_flash_attention_for_cpu_backward.default:
            flash_attention_for_cpu_backward,
    }
