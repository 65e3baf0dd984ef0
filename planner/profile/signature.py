"""The identity of an op measurement: what makes two ops cost the same on the same machine.

Op type, domain, the opset of that domain, attributes (tensor attributes by dtype, shape and a
hash of their bytes) and the dtypes and shapes of every positional input and output. Two ops of a
graph with the same signature are measured once.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np

from planner.ir.graph import Graph, Op


def _plain(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        data = np.require(value, requirements="C")
        return {"dtype": str(data.dtype), "shape": list(data.shape),
                "sha256": hashlib.sha256(data.tobytes()).hexdigest()}
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, str | int | bool) or value is None:
        return value
    return repr(value)


def op_signature(graph: Graph, op: Op) -> str:
    """Canonical JSON describing everything the op's cost depends on (but the machine)."""
    opsets = {imp.domain or "": imp.version for imp in graph.proto.opset_import}
    domain = op.domain if op.domain != "ai.onnx" else ""
    opset = opsets.get(domain, opsets.get("ai.onnx", graph.opset))

    def io(ids: tuple[int | None, ...]) -> list[list[Any] | None]:
        return [None if t is None else [graph.tensors[t].dtype, list(graph.tensors[t].shape)]
                for t in ids]

    same_as = [op.inputs.index(t) if t is not None else None for t in op.inputs]
    return json.dumps({
        "op_type": op.op_type,
        "domain": domain,
        "opset": opset,
        "attributes": {k: _plain(v) for k, v in sorted(op.attributes.items())},
        "inputs": io(op.inputs),
        "aliases": same_as,
        "outputs": io(op.outputs),
    }, sort_keys=True, separators=(",", ":"))
