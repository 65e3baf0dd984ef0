"""When a traced op has no ONNX translation: say which op, where in the user's model, what to do.

`untranslatable_ops` checks the traced step before the ONNX exporter runs: an ATen op the
exporter's registry neither translates nor decomposes would make it fail with torch's own advice
("implement it and register it ..."), which a user of arenaplan cannot act on. Instead
`missing_ops_message` names the op, the module of the user's model that called it (found by
running the forward pass once with hooks that track the module path; for a backward op, the
module that called its forward op) and what the user can change, in a few lines.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from planner.export._deps import require_torch

torch = require_torch()

#: (words in the op name, what the user can do), first match wins.
ADVICE: tuple[tuple[tuple[str, ...], str], ...] = (
    (("attention",), "call torch.nn.functional.scaled_dot_product_attention without selecting a "
     "backend (the exporter traces it with the math backend), or select attn_implementation="
     "'sdpa' or 'eager' in Hugging Face models"),
    (("rnn", "lstm", "gru"), "use nn.LSTM, nn.GRU or nn.RNN on the CPU in float32 (the exporter "
     "unrolls them over the sequence); packed sequences and fused cells are not exported"),
    (("upsample", "grid_sampler", "interp"), "interpolate with mode 'nearest', "
     "'nearest-exact', 'linear', 'bilinear' or 'trilinear' and no antialias"),
)
GENERIC_ADVICE = ("write this computation with standard tensor operations (matmul, elementwise, "
                  "reductions, indexing) or keep it out of the exported training step")


@functools.cache
def _onnx_registry() -> Any | None:
    """The exporter's table of translated ops (private API: None when it moved)."""
    from planner.export.onnx_graph import quiet

    try:
        from torch.onnx._internal.exporter import _registration
    except ImportError:
        return None
    with quiet():
        return _registration.ONNXRegistry.from_torchlib()


def untranslatable_ops(graph_module: Any) -> list[Any]:
    """ATen ops of the traced step that the ONNX exporter can neither translate nor decompose,
    in graph order (empty when the registry cannot be consulted)."""
    registry = _onnx_registry()
    if registry is None:
        return []
    decomposed = {**torch.export.default_decompositions(), **torch._decomp.decomposition_table}
    missing: list[Any] = []
    for node in graph_module.graph.nodes:
        target = node.target
        if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
            continue
        if target in missing or registry.is_registered(target) or target in decomposed:
            continue
        if target._schema.is_mutable or _is_composite(target):
            continue  # functionalized, or decomposed, by torch.export before translation
        missing.append(target)
    return missing


def _is_composite(op: Any) -> bool:
    return torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CompositeImplicitAutograd")


def _op_name(op: Any) -> str:
    return f"aten.{op._overloadpacket.__name__}"


def _forward_name(op: Any) -> str:
    """The op whose call in the forward pass made this (backward) op: `x_backward` -> `x`."""
    return re.sub(r"_backward$", "", op._overloadpacket.__name__)


def _callers(model: Any, inputs: Sequence[Any]) -> dict[str, tuple[str, str]]:
    """ATen op name -> (module path, class) of the innermost module that first called it, from
    one forward pass in the tracing context."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from planner.export.trace import tracing_context

    stack: list[tuple[str, str]] = [("", type(model).__name__)]
    callers: dict[str, tuple[str, str]] = {}

    class RecordCallers(TorchDispatchMode):
        def __torch_dispatch__(
            self, func: Any, types: Sequence[type], args: Sequence[Any] = (),
            kwargs: dict[str, Any] | None = None,
        ) -> Any:
            callers.setdefault(func._overloadpacket.__name__, stack[-1])
            return func(*args, **(kwargs or {}))

    def enter(entry: tuple[str, str]) -> Callable[..., None]:
        return lambda *_: stack.append(entry)

    def leave(*_: Any) -> None:  # a forward hook that returned a value would replace the output
        stack.pop()

    handles = []
    for path, module in model.named_modules():
        if path:
            handles.append(module.register_forward_pre_hook(enter((path, type(module).__name__))))
            handles.append(module.register_forward_hook(leave))
    try:
        with tracing_context(), RecordCallers():
            model(*inputs)
    except Exception:  # noqa: BLE001 - locating is best effort; the op name is still reported
        pass
    finally:
        for handle in handles:
            handle.remove()
    return callers


def advice_for(op: Any) -> str:
    name = op._overloadpacket.__name__.lower()
    for words, advice in ADVICE:
        if any(word in name for word in words):
            return advice
    return GENERIC_ADVICE


def _lines(ops: Sequence[Any], callers: dict[str, tuple[str, str]]) -> Iterator[str]:
    for op in ops:
        forward = _forward_name(op)
        gradient = "" if forward == op._overloadpacket.__name__ else \
            f" (gradient of aten.{forward})"
        where = callers.get(forward)
        if where is None:
            place = "not called by a module of the model (in the loss function?)"
        else:
            path, cls = where
            place = f"in module {path} ({cls})" if path else f"in the model's forward() ({cls})"
        yield f"  {_op_name(op)}{gradient} {place}"
        yield f"    what to do: {advice_for(op)}"


def missing_ops_message(ops: Sequence[Any], model: Any, inputs: Sequence[Any]) -> str:
    """The short error for ops without ONNX translation (see module doc)."""
    callers = _callers(model, inputs)
    plural = "s have" if len(ops) > 1 else " has"
    return "\n".join([
        f"cannot export the training step: {len(ops)} op{plural} no ONNX translation",
        *_lines(ops, callers),
    ])


def short_reason(exc: BaseException) -> str:
    """The innermost cause's first line, without torch's advice text or terminal colours."""
    inner = exc
    while inner.__cause__ is not None:
        inner = inner.__cause__
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(inner)).strip()
    first = text.splitlines()[0] if text else ""
    return f"{type(inner).__name__}: {first}"
