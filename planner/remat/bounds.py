"""A lower bound on the step time of every schedule of an order within one device's budget.

"Each op once on its fastest device" ignores the budget. This bound adds what the budget forces,
at the step where it forces the most (the crossing bound):

At the first computation of the op at position t of the order, the bytes of constants and
state, and of the op's own inputs and outputs, are live whatever the schedule. Every other value
made before t and read after t (it *crosses* t) is either live at t too, or is made again after
t, which runs its producer a second time. When those bytes exceed the budget, values of at least
the excess must be dropped, and the least time that costs is a knapsack; its fractional
relaxation (cheapest seconds per byte first) is a lower bound. The bound is the time of every op
once plus the largest such relaxation over the steps examined (any subset of steps gives a valid
bound: the steps with the most crossing bytes are examined). A step whose excess cannot be
dropped at all (values that cannot be made again: data inputs, random ops) proves the budget
infeasible for the order.

Each run is priced at its least time, in place or not (CostTable.least_seconds). Storage is
counted as the memory model counts it (planner.memory.sharing): a view adds nothing
to its source, so values are grouped by view root; a value of a state's update chain adds
nothing (it may sit in the state's storage: the momentum chain's `mu * v`, made early and held
until the gradient comes, counted as its own bytes put this bound above the keep-everything
schedule's time at that schedule's own peak); two values crossing the same step never share
bytes in place (writing over a value needs it dead). A producer with several roots among its
outputs has its time split between them, so that dropping all of them is never charged more than
one run. Sizes are rounded up to the arena's alignment, as the replayed peaks are.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from planner.ir.graph import Graph
from planner.memory.sharing import Sharing, state_updates
from planner.memory.zones import buffer_bytes, persistent_tensors
from planner.profile.costs import CostTable
from planner.remat.problem import NONDETERMINISTIC_OPS

# Steps examined: those with the most crossing bytes (each costs one sort of the crossing set).
EXAMINED_STEPS = 256


@dataclass(frozen=True)
class CrossingBound:
    seconds: float  # a lower bound on every schedule's time (inf: no schedule fits)
    extra_seconds: float  # what the budget adds to each op once
    step: int | None  # position in the order where the extra is forced (None: nowhere)


def crossing_bound(graph: Graph, order: Sequence[int], device: str, budget: int,
                   costs: CostTable, *, alignment: int = 1) -> CrossingBound:
    """See the module doc; `costs` on `device`, the one device every op runs on."""
    once = sum(costs.least_seconds(op, device) for op in range(len(costs.op_seconds)))
    sharing = state_updates(graph)
    always = persistent_tensors(graph) | sharing.in_state
    position = {op: k for k, op in enumerate(order)}
    end = len(order)

    def aligned(tensor: int) -> int:
        return buffer_bytes(graph.tensors[tensor].nbytes, alignment)

    # Groups: one per view root outside the persistent zone, from its root's making to the last
    # first computation reading any of its members (graph outputs: to the end).
    made: dict[int, int] = {}
    last_read: dict[int, int] = {}
    for tensor in graph.tensors:
        root = sharing.view_root(tensor.id)
        if root in always:
            continue
        producer = graph.tensors[root].producer
        made[root] = -1 if producer is None else position[producer]
        reads = [position[c] for c in tensor.consumers]
        if tensor.is_graph_output:
            reads.append(end)
        if reads:
            last_read[root] = max(last_read.get(root, -1), *reads)
    if not last_read:
        return CrossingBound(once, 0.0, None)
    groups = sorted(last_read)
    index = {r: k for k, r in enumerate(groups)}
    first = np.array([made[r] for r in groups], dtype=np.int64)
    last = np.array([last_read[r] for r in groups], dtype=np.int64)
    size = np.array([aligned(r) for r in groups], dtype=np.int64)
    cost = np.array([math.inf if graph.tensors[r].is_graph_output
                     else _remake_seconds(graph, r, costs, device) for r in groups])
    # Bytes crossing each step (made before it, read after it), from a difference array.
    delta = np.zeros(end + 1, dtype=np.int64)
    spans = last > first + 1
    np.add.at(delta, first[spans] + 1, size[spans])
    np.add.at(delta, np.minimum(last[spans], end), -size[spans])
    crossing_bytes = np.cumsum(delta)[:end]
    base = sum(aligned(t) for t in persistent_tensors(graph))
    worst, worst_step = 0.0, None
    for t in np.argsort(-crossing_bytes, kind="stable")[:EXAMINED_STEPS]:
        t = int(t)
        op = graph.ops[order[t]]
        outputs = [x for x in op.output_ids if not _may_overwrite(sharing, x, always)]
        footprint = {sharing.view_root(x) for x in (*op.input_ids, *outputs)} - always
        mine = [index[r] for r in footprint if r in index]
        live = (first < t) & (last > t)
        live[mine] = False
        need = base + sum(aligned(r) for r in footprint) + int(size[live].sum())
        if need <= budget:
            continue
        extra = _fractional_knapsack(size[live], cost[live], need - budget)
        if extra > worst:
            worst, worst_step = extra, t
            if math.isinf(extra):
                break
    return CrossingBound(once + worst, worst, worst_step)


def _may_overwrite(sharing: Sharing, output: int, always: set[int] | frozenset[int]) -> bool:
    """Whether `output` may be written over one of its op's transient inputs (then it adds no
    bytes of its own to the op's footprint)."""
    return any(sharing.view_root(x) not in always for x in sharing.candidates.get(output, ()))


def _remake_seconds(graph: Graph, root: int, costs: CostTable, device: str) -> float:
    """Least time to make `root` again: its producer's run, shared among the producer's
    outputs; inf when it cannot be made again (a graph input, a random op)."""
    producer = graph.tensors[root].producer
    if producer is None or graph.ops[producer].op_type in NONDETERMINISTIC_OPS:
        return math.inf
    outputs = len(graph.ops[producer].output_ids)
    return costs.least_seconds(producer, device) / max(1, outputs)


def _fractional_knapsack(size: np.ndarray, cost: np.ndarray, excess: int) -> float:
    """Least cost of dropping at least `excess` bytes, items divisible (cheapest per byte
    first); inf when all of them are not enough."""
    if int(size.sum()) < excess:
        return math.inf
    ratio = cost / np.maximum(size, 1)
    ranked = np.argsort(ratio, kind="stable")
    cumulative = np.cumsum(size[ranked])
    k = int(np.searchsorted(cumulative, excess))  # items ranked[:k + 1] cover the excess
    before = float(cost[ranked[:k]].sum())
    covered = int(cumulative[k - 1]) if k else 0
    return before + float(ratio[ranked[k]]) * (excess - covered)
