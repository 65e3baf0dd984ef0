"""Structural analysis of a training step: loss, updated state, tensor roles and op regions.

Names are never trusted: exporters name things differently, and users rename. Everything here is
derived from the dataflow alone.

- Loss: the scalar float graph output with the most ancestors (the forward pass funnels into it).
- Forward region: the ops the loss depends on.
- Updated state (training graphs only, i.e. with a loss): an output that replaces an input.
  Candidates are (input, output) pairs of equal
  shape where the input reaches the output through a chain of equal-shape elementwise ops
  ("lane"); pairs are matched greedily, shortest chain first (p_new = p - lr*g puts p one hop
  from p_new, while the momentum or Adam moments of p sit further away).
- Optimizer region: the elementwise tail that feeds only updated outputs (p - lr*g, the Adam
  moments, running-stat blends). It stops at the first op that changes shape (a MatMul producing a
  weight gradient, a ReduceSum producing a bias gradient). Known limitation: an elementwise sum of
  two gradient contributions (shared weights) just before the update lands in this tail too.
- Backward region: the other ops whose result reaches a parameter's new value (gradient work).
  What is left (running statistics, dead values) is a side computation of the forward pass.
- Input roles: updated inputs the loss depends on are parameters; other updated inputs are
  optimizer state when their value flows into a parameter's new value (momenta, Adam moments and
  step count), else buffers (batch-norm running stats, num_batches_tracked). Non-updated inputs
  are data when a forward op combines them with a parameter-only value (x @ W), labels otherwise
  (they meet the model only in the loss).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# Ops that compute each output element from the same element of each input (plus broadcast
# scalars): the only ops an optimizer update or a state blend is made of.
ELEMENTWISE_OPS = frozenset({
    "Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Reciprocal", "Neg", "Abs", "Sign", "Exp", "Log",
    "Max", "Min", "Clip", "Where", "Cast", "Identity", "Less", "LessOrEqual", "Greater",
    "GreaterOrEqual", "Equal", "Not", "And", "Or", "Mod", "Floor", "Ceil", "Round",
})


@dataclass(frozen=True)
class Structure:
    """The dataflow facts the analysis needs, by integer op and tensor ids."""

    op_types: list[str]
    op_inputs: list[tuple[int, ...]]
    op_outputs: list[tuple[int, ...]]
    producer: list[int | None]
    consumers: list[list[int]]
    shapes: list[tuple[int, ...]]
    is_float: list[bool]
    graph_inputs: list[int]
    graph_outputs: list[int]
    initializers: set[int]


@dataclass(frozen=True)
class Analysis:
    loss: int | None
    updates: dict[int, int]  # state input id -> output id with its new value
    tensor_roles: list[str]  # TensorRole values by tensor id
    op_regions: list[str]  # Region values by op id


def analyze(s: Structure, known_updates: dict[int, int] | None = None) -> Analysis:
    """`known_updates`: the state updates, when they are known from elsewhere (a graph ONNX
    Runtime rewrote keeps the names of the model's; a fused op may break an elementwise lane)."""
    loss = find_loss(s)
    forward = ancestor_ops(s, loss) if loss is not None else set()
    # Without a loss this is not a training step: an input that reaches an output of the same
    # shape through elementwise ops (x -> Relu -> y) is data, not state.
    if known_updates is not None:
        updates = dict(known_updates)
    else:
        updates = match_updates(s, exclude={loss}) if loss is not None else {}
    tail = optimizer_tail(s, forward, set(updates.values()))
    if loss is None:  # no loss, no backward pass: everything but a state update is forward
        forward = set(range(len(s.op_types))) - tail
    read_by_forward = {t for op in forward for t in s.op_inputs[op]}
    parameters = {i for i in updates if i in read_by_forward}
    regions = _regions(s, forward, tail, {updates[p] for p in parameters})
    roles = _tensor_roles(s, loss, forward, updates, parameters, regions)
    return Analysis(loss=loss, updates=updates, tensor_roles=roles, op_regions=regions)


def find_loss(s: Structure) -> int | None:
    """The scalar float output with the most ancestors, preferring outputs that are not
    elementwise lanes from an input (a 1-element bias's updated value is such a lane)."""
    candidates = [
        t for t in s.graph_outputs
        if s.is_float[t] and math.prod(s.shapes[t]) == 1 and s.producer[t] is not None
    ]
    if not candidates:
        return None
    inputs = set(s.graph_inputs) - s.initializers
    return max(
        candidates,
        key=lambda t: (
            not (inputs & set(_lane_distances(s, t))),
            len(ancestor_ops(s, t)),
            -s.graph_outputs.index(t),
        ),
    )


def ancestor_ops(s: Structure, tensor: int) -> set[int]:
    """Every op whose result `tensor` depends on."""
    seen: set[int] = set()
    first = s.producer[tensor]
    stack = [first] if first is not None else []
    while stack:
        op = stack.pop()
        if op in seen:
            continue
        seen.add(op)
        for t in s.op_inputs[op]:
            p = s.producer[t]
            if p is not None and p not in seen:
                stack.append(p)
    return seen


def _lane_distances(s: Structure, output: int) -> dict[int, int]:
    """Graph inputs reaching `output` through equal-shape elementwise ops, with their hop count."""
    shape = s.shapes[output]
    found: dict[int, int] = {}
    frontier = [output]
    seen = {output}
    hops = 0
    while frontier:
        hops += 1
        nxt = []
        for t in frontier:
            op = s.producer[t]
            if op is None or s.op_types[op] not in ELEMENTWISE_OPS:
                continue
            for x in s.op_inputs[op]:
                if x in seen or s.shapes[x] != shape:
                    continue
                seen.add(x)
                if s.producer[x] is None:
                    found.setdefault(x, hops)
                else:
                    nxt.append(x)
        frontier = nxt
    return found


def match_updates(s: Structure, exclude: set[int]) -> dict[int, int]:
    """Pair each state input with the output holding its new value (see module docstring)."""
    inputs = set(s.graph_inputs) - s.initializers
    output_rank = {t: i for i, t in enumerate(s.graph_outputs)}
    input_rank = {t: i for i, t in enumerate(s.graph_inputs)}
    candidates = []
    for out in s.graph_outputs:
        if out in exclude or s.producer[out] is None:
            continue
        for inp, hops in _lane_distances(s, out).items():
            if inp in inputs:
                candidates.append((hops, output_rank[out], input_rank[inp], inp, out))
    pairs: dict[int, int] = {}
    taken: set[int] = set()
    for _, _, _, inp, out in sorted(candidates):
        if inp not in pairs and out not in taken:
            pairs[inp] = out
            taken.add(out)
    return pairs


def optimizer_tail(s: Structure, forward: set[int], updated_outputs: set[int]) -> set[int]:
    """Elementwise ops outside the forward region that feed only updated outputs (or each other).

    Found in one reverse pass: an op joins when all consumers of all its outputs already joined,
    or its outputs are updated-state outputs.
    """
    tail: set[int] = set()
    graph_outputs = set(s.graph_outputs)
    for op in range(len(s.op_types) - 1, -1, -1):
        if op in forward or not s.op_outputs[op]:
            continue
        if s.op_types[op] not in ELEMENTWISE_OPS and s.op_inputs[op]:
            continue
        outs = s.op_outputs[op]
        shape = s.shapes[outs[0]]
        if any(math.prod(s.shapes[x]) != 1 and s.shapes[x] != shape for x in s.op_inputs[op]):
            continue
        feeds_update = False
        ok = True
        for t in outs:
            if t in updated_outputs:
                feeds_update = True
            elif t in graph_outputs:
                ok = False
            for c in s.consumers[t]:
                if c in tail:
                    feeds_update = True
                else:
                    ok = False
        if ok and feeds_update:
            tail.add(op)
    return tail


def _regions(
    s: Structure, forward: set[int], tail: set[int], parameter_updates: set[int]
) -> list[str]:
    """Forward / backward / optimizer per op.

    Outside the loss's ancestors and the optimizer tail, an op is backward when its result
    reaches a parameter's new value (it is part of computing a gradient); otherwise it is a side
    computation of the forward pass (running statistics, dead values).
    """
    toward_parameters = _reaches_any(s, parameter_updates)
    regions = []
    for op in range(len(s.op_types)):
        if op in forward:
            regions.append("forward")
        elif op in tail:
            regions.append("optimizer")
        elif toward_parameters[op]:
            regions.append("backward")
        else:
            regions.append("forward")
    # A source op (Constant) belongs where its first consumer runs, not to a region by default.
    for op in range(len(s.op_types)):
        if s.op_inputs[op] or op in forward:
            continue
        first = min(
            (c for t in s.op_outputs[op] for c in s.consumers[t]), default=None
        )
        if first is not None:
            regions[op] = regions[first]
    return regions


def _tensor_roles(
    s: Structure, loss: int | None, forward: set[int], updates: dict[int, int],
    parameters: set[int], regions: list[str],
) -> list[str]:
    roles = [""] * len(s.shapes)
    feeds_parameter_update = _reaches_any(s, {updates[p] for p in parameters})

    for t in s.initializers:
        roles[t] = "constant"
    for inp in updates:
        if inp in parameters:
            roles[inp] = "parameter"
            continue
        if any(feeds_parameter_update[c] for c in s.consumers[inp]):
            roles[inp] = "optimizer_state"
        else:
            roles[inp] = "buffer"
    param_only = _parameter_only(s, parameters)
    for inp in s.graph_inputs:
        if roles[inp]:
            continue
        if loss is None or _meets_parameter(s, inp, forward, param_only):
            roles[inp] = "data"
        else:
            roles[inp] = "label"
    region_role = {"forward": "activation", "backward": "gradient", "optimizer": "optimizer_temp"}
    outputs = set(s.graph_outputs)
    for t in range(len(s.shapes)):
        if roles[t]:
            continue
        if t in outputs:
            roles[t] = "output"
        elif (producer := s.producer[t]) is not None:
            roles[t] = region_role[regions[producer]]
        else:
            roles[t] = "constant"
    return roles


def _reaches_any(s: Structure, targets: set[int]) -> list[bool]:
    """Per op: does some tensor in `targets` depend on its result? One reverse pass."""
    reaches = [False] * len(s.op_types)
    for op in range(len(s.op_types) - 1, -1, -1):
        reaches[op] = any(
            t in targets or any(reaches[c] for c in s.consumers[t]) for t in s.op_outputs[op]
        )
    return reaches


def _parameter_only(s: Structure, parameters: set[int]) -> list[bool]:
    """Per tensor: derived from parameters (and constants) only, not from any other input."""
    n = len(s.shapes)
    has_param = [False] * n
    has_other = [False] * n
    for t in s.graph_inputs:
        if t in parameters:
            has_param[t] = True
        elif t not in s.initializers:
            has_other[t] = True
    for op in range(len(s.op_types)):
        hp = any(has_param[t] for t in s.op_inputs[op])
        ho = any(has_other[t] for t in s.op_inputs[op])
        for t in s.op_outputs[op]:
            has_param[t], has_other[t] = hp, ho
    return [hp and not ho for hp, ho in zip(has_param, has_other, strict=True)]


def _meets_parameter(s: Structure, inp: int, forward: set[int], param_only: list[bool]) -> bool:
    """Does some forward op downstream of `inp` also read a parameter-only value?"""
    seen: set[int] = set()
    stack = [c for c in s.consumers[inp] if c in forward]
    while stack:
        op = stack.pop()
        if op in seen:
            continue
        seen.add(op)
        if any(param_only[t] for t in s.op_inputs[op]):
            return True
        for t in s.op_outputs[op]:
            stack.extend(c for c in s.consumers[t] if c in forward and c not in seen)
    return False
