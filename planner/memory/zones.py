"""Which tensors outlive the step, and the one live-bytes sum every peak is taken from.

Constants and state are persistent: held for the whole step whatever the order or schedule
(CalcGraph's parameter / optimizer heap zones); graph outputs are held from their making to the
end. Everything else is transient: live from its write to its last read.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import accumulate

from planner.ir.graph import Graph


def buffer_bytes(nbytes: int, alignment: int) -> int:
    """The bytes an arena gives a tensor of `nbytes`: rounded up to `alignment`, and at least one
    unit even when empty (every buffer gets an address of its own). Every memory count that must
    not undercount the layout (replay, the remat model, eviction, the bounds) takes sizes from
    here: the remat model once counted an empty tensor as nothing and accepted a schedule whose
    replay was one unit over the budget."""
    return -(-max(nbytes, 1) // alignment) * alignment


def persistent_tensors(graph: Graph) -> frozenset[int]:
    """Constants and state: held for the whole step, whatever the order or schedule."""
    return frozenset(t.id for t in graph.tensors
                     if t.updated_by is not None or t.is_initializer)


def outlives_step(graph: Graph) -> frozenset[int]:
    """Tensors never freed within a step: constants, state and graph outputs."""
    return persistent_tensors(graph) | {t.id for t in graph.tensors if t.is_graph_output}


def live_curve(ranges: Iterable[tuple[int, int, int]], n_steps: int) -> list[int]:
    """Bytes live at each of `n_steps` steps, given (first, last, bytes) with inclusive ranges
    (a last step past the end counts to the end): the one sum every peak is taken from."""
    delta = [0] * (n_steps + 1)
    for first, last, nbytes in ranges:
        delta[first] += nbytes
        delta[min(last, n_steps - 1) + 1] -= nbytes
    return list(accumulate(delta[:n_steps]))
