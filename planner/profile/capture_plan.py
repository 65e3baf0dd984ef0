"""Which captured values a cold profile holds at once: the ops to measure, in chunks whose input
values fit a memory allowance.

Each op is measured on real inputs, captured from a run of the graph. Capturing every
intermediate of the step at once held GPT-2-small's whole step in memory (13.0 GB of op outputs
and 1.5 GB of inputs; `arenaplan profile` peaked at 14.9 GB RSS), which on a smaller machine is
an OOM kill with no message. Only one op per distinct signature is measured (the others share its
costs), and those ops read 3.3 GB of intermediates there. So the ops to measure are taken in
graph order and grouped into chunks whose intermediate inputs fit the allowance; the profiler
captures a chunk's values (one run of the ops they depend on: planner.profile.inputs), measures
its ops and releases them before the next chunk. An op whose own inputs exceed the allowance is
not measured: it gets the labelled roofline estimate (planner.profile.estimate).

Graph inputs and initializers are held throughout (every capture is fed them) and are not
counted against the allowance, which planner.profile.host_memory derives from the available
memory once they are drawn.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from planner.ir.graph import Graph, Op


@dataclass(frozen=True)
class Chunk:
    """Ops measured on one capture: the intermediates they read and those values' bytes."""

    ops: tuple[Op, ...]
    tensors: frozenset[int]
    nbytes: int


@dataclass(frozen=True)
class CapturePlan:
    chunks: tuple[Chunk, ...]
    over_allowance: tuple[Op, ...]  # each reads more than the allowance on its own


def intermediate_inputs(graph: Graph, op: Op) -> frozenset[int]:
    """The inputs of `op` that an op produces (the rest are graph inputs or initializers)."""
    return frozenset(t for t in op.input_ids if graph.tensors[t].producer is not None)


def plan_capture(graph: Graph, ops: Sequence[Op], allowance_bytes: int | None) -> CapturePlan:
    """`ops` in graph order, grouped greedily into chunks whose intermediate inputs take at most
    `allowance_bytes` together (None: no bound, one chunk); ops that alone exceed it are left
    out."""
    chunks: list[Chunk] = []
    over: list[Op] = []
    members: list[Op] = []
    tensors: set[int] = set()
    held = 0

    def close() -> None:
        if members:
            chunks.append(Chunk(tuple(members), frozenset(tensors), held))
            members.clear()
            tensors.clear()

    for op in sorted(ops, key=lambda o: o.id):
        reads = intermediate_inputs(graph, op)
        if allowance_bytes is not None and _bytes(graph, reads) > allowance_bytes:
            over.append(op)
            continue
        extra = _bytes(graph, reads - tensors)
        if allowance_bytes is not None and held + extra > allowance_bytes:
            close()
            held, extra = 0, _bytes(graph, reads)
        members.append(op)
        tensors.update(reads)
        held += extra
    close()
    return CapturePlan(tuple(chunks), tuple(over))


def _bytes(graph: Graph, tensors: frozenset[int] | set[int]) -> int:
    return sum(graph.tensors[t].nbytes for t in tensors)
