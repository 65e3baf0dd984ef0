"""Random ops (dropout) in an exported training step: seeded in the graph, replayed in torch.

Dropout stays in the model (p > 0, training mode). Traced, torch's dropout becomes
`bernoulli(keep)`, which the ONNX exporter writes as `RandomUniformLike(x) < keep`: the mask is
made inside the graph by a standard op that onnxruntime runs.

- `seed_random_nodes` gives every random node its own fixed `seed` attribute. onnxruntime seeds
  a random kernel once, when the session is created, and draws the next values at every run, so
  two sessions that run each random node once per step (the runtime's segments and the whole
  graph in `arenaplan run --check`) draw the same masks step after step.
- `expose_draws` is the same graph with every random node's output also a graph output, so that
  verification can read the draws of one run; `ReplayDraws` is a torch dispatch mode in which
  torch's Bernoulli and uniform ops return masks made from those draws, in call order. An eager
  torch step under it uses the graph's masks, and the two are compared as without dropout.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from onnx import helper

from planner.export._deps import require_torch

if TYPE_CHECKING:  # torch is imported at run time through require_torch (the optional extra)
    from torch import Tensor

torch = require_torch()
aten = torch.ops.aten

#: ONNX ops whose outputs are random draws.
RANDOM_OPS = frozenset({"RandomUniformLike", "RandomUniform", "RandomNormalLike",
                        "RandomNormal", "Bernoulli", "Multinomial"})


class UnverifiableRandomnessError(RuntimeError):
    """The torch step draws random numbers the graph's draws cannot stand in for."""


def random_nodes(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    return [node for node in model.graph.node if node.op_type in RANDOM_OPS]


def seed_random_nodes(model: onnx.ModelProto) -> int:
    """Seed random node i (graph order) with i + 1, in place; returns how many there are."""
    nodes = random_nodes(model)
    for index, node in enumerate(nodes):
        kept = [a for a in node.attribute if a.name != "seed"]
        del node.attribute[:]
        node.attribute.extend(kept)
        node.attribute.append(helper.make_attribute("seed", float(index + 1)))
    return len(nodes)


def expose_draws(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[str]]:
    """A copy whose outputs also include every random node's output (graph order)."""
    exposed = copy.deepcopy(model)
    names = [node.output[0] for node in random_nodes(exposed)]
    known = {v.name: v for v in exposed.graph.value_info}
    for name in names:
        exposed.graph.output.append(known[name] if name in known
                                    else helper.make_empty_tensor_value_info(name))
    return exposed, names


class ReplayDraws:
    """Dispatch mode: torch's random ops return values made from the graph's draws, in order.

    `bernoulli(x, keep)` (eager dropout) becomes `draw < keep` like the exported graph;
    `rand_like` / `uniform_` return the draw itself. Any other random op cannot be verified when
    the graph draws (without draws, ops that merely may draw, like fused attention without
    dropout, run as they are). Run the torch step in `draws_context` too.
    """

    def __init__(self, draws: Sequence[np.ndarray]) -> None:
        self.draws = list(draws)
        self.used = 0

    def _next(self, like: Tensor) -> Tensor:
        if self.used >= len(self.draws):
            raise UnverifiableRandomnessError(
                "the torch step draws more random tensors than the exported graph")
        draw = torch.from_numpy(np.asarray(self.draws[self.used]))
        self.used += 1
        if tuple(draw.shape) != tuple(like.shape):
            raise UnverifiableRandomnessError(
                f"random draw {self.used} has shape {tuple(draw.shape)} in the graph but "
                f"{tuple(like.shape)} in torch")
        return draw

    def draws_context(self) -> Any:
        """Attention on the math backend when the graph draws, as traced: its dropout then
        calls bernoulli, which this mode replays, instead of a fused kernel's own generator."""
        from planner.export.attention import math_attention

        return math_attention() if self.draws else contextlib.nullcontext()

    def mode(self) -> Any:
        from torch.utils._python_dispatch import TorchDispatchMode

        replay = self

        class Replay(TorchDispatchMode):
            def __torch_dispatch__(
                self, func: Any, types: Sequence[type], args: Sequence[Any] = (),
                kwargs: dict[str, Any] | None = None,
            ) -> Any:
                kwargs = kwargs or {}
                if func in (aten.bernoulli_.float, aten.bernoulli.p):
                    # The dispatcher leaves out arguments equal to their default (p=0.5).
                    target = args[0]
                    keep = args[1] if len(args) > 1 else kwargs.get("p", 0.5)
                    mask = (replay._next(target) < keep).to(target.dtype)
                    return target.copy_(mask) if func is aten.bernoulli_.float else mask
                if func in (aten.rand_like.default, aten.uniform_.default):
                    draw = replay._next(args[0]).to(args[0].dtype)
                    return args[0].copy_(draw) if func is aten.uniform_.default else draw
                if replay.draws and torch.Tag.nondeterministic_seeded in func.tags:
                    raise UnverifiableRandomnessError(
                        f"the random op aten.{func.__name__} cannot be replayed from the "
                        "graph's draws")
                return func(*args, **kwargs)

        return Replay()
