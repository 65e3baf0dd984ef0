"""Exact checkpointing of a chain by dynamic programming (Butt 2019, REFERENCES.md's corrected
pseudo-code), and its policy executed as a Schedule.

A chain: forward ops f_1..f_N (f_l reads f_(l-1); f_0 is a graph input), backward ops b_N..b_0
(b_i reads f_i and b_(i+1); b_(N+1) is a graph input), b_0 the output. C(i, j, m): least compute
to produce b_i from resident f_i (outside m) and an owned b_j within m memory units; B its peak;
D the split k (run forwards i+1..k keeping f_k, solve (k, j, m - bf[k]) then (i, k, m)), QUAD
(recompute everything from f_i for each backward) or LEAF.

One correction to REFERENCES.md's pseudo-code: when (i, j, m) fails it marks every
(i, j' >= j, m) failed and leaves the j loop; with uneven sizes (i, j + 1) can succeed where
(i, j) fails (it holds the smaller b_(j+1) while its forwards run), so the loop goes on.

The DP is exact over *persistent* schedules (a checkpoint kept after the forward phase stays
until its backward); a general remat model can do better on chains by dropping a checkpoint and
recomputing it later (tests compare CP-SAT restricted to persistent schedules with this DP, and
check the unrestricted model never does worse).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from planner.ir.graph import Graph, Region
from planner.memory.schedule import Compute, Event, Schedule, free_after_last_read, home_on
from planner.memory.zones import buffer_bytes
from planner.profile.costs import CostTable

LEAF, QUAD, NONE = -1, -2, -3
UNSET = -1  # a peak of no schedule


@dataclass(frozen=True)
class Chain:
    forward_ops: tuple[int, ...]  # f_1..f_N (op ids)
    backward_ops: tuple[int, ...]  # b_0..b_N (op ids, index i is b_i)
    f0: int  # tensor id of f_0
    b_last: int  # tensor id of b_(N+1)
    af: tuple[float, ...]  # af[l], l = 1..N (af[0] = 0)
    ab: tuple[float, ...]  # ab[i], i = 0..N
    bf: tuple[int, ...]  # bf[l], l = 0..N (units)
    bb: tuple[int, ...]  # bb[i], i = 0..N+1 (units)


def find_chain(graph: Graph, costs: CostTable, device: str = "cpu",
               memory_unit: int = 1) -> Chain | None:
    """The chain structure of `graph` (see module doc), or None when it is not one."""
    forward = [op for op in graph.ops if op.region is Region.FORWARD]
    backward = [op for op in graph.ops if op.region is not Region.FORWARD]
    if len(graph.inputs) != 2 or not forward or len(backward) != len(forward) + 1:
        return None
    if any(len(op.output_ids) != 1 for op in graph.ops):
        return None
    n = len(forward)
    f_tensors: list[int] = []
    first = forward[0]
    if len(first.input_ids) != 1 or first.input_ids[0] not in graph.inputs:
        return None
    f_tensors.append(first.input_ids[0])
    chain_f = []
    current = first.input_ids[0]
    for _ in range(n):
        readers = [graph.ops[c] for c in graph.tensors[current].consumers
                   if graph.ops[c].region is Region.FORWARD]
        if len(readers) != 1 or readers[0].input_ids != (current,):
            return None
        chain_f.append(readers[0].id)
        current = readers[0].output_ids[0]
        f_tensors.append(current)
    b_last = next((t for t in graph.inputs if t != f_tensors[0]), None)
    if b_last is None:
        return None
    chain_b: list[int] = [0] * (n + 1)
    b_tensor = b_last
    for i in range(n, -1, -1):
        readers = [graph.ops[c] for c in graph.tensors[b_tensor].consumers]
        if len(readers) != 1 or set(readers[0].input_ids) != {f_tensors[i], b_tensor}:
            return None
        chain_b[i] = readers[0].id
        b_tensor = readers[0].output_ids[0]
    if graph.outputs != (b_tensor,):
        return None

    def units(t: int) -> int:
        return buffer_bytes(graph.tensors[t].nbytes, memory_unit) // memory_unit

    def cost(op: int) -> float:
        return costs.op_seconds[op][device]

    return Chain(
        forward_ops=tuple(chain_f), backward_ops=tuple(chain_b), f0=f_tensors[0], b_last=b_last,
        af=(0.0, *(cost(op) for op in chain_f)), ab=tuple(cost(op) for op in chain_b),
        bf=tuple(units(t) for t in f_tensors),
        bb=(*(units(graph.ops[op].output_ids[0]) for op in chain_b), units(b_last)),
    )


@dataclass(frozen=True)
class ChainSolution:
    cost: float  # total compute (forwards at least once, every backward once)
    peak: int  # units, including f_0
    policy: np.ndarray  # [i, j, m] -> k | LEAF | QUAD (NONE: (i, j, m) has no schedule)


# The largest DP solve_chain runs: cells of its tables ((N + 2)^2 * (budget + 1); three arrays of
# 8 B each) and elements its vector steps touch (cells * (N + 2) / 3; about 0.3 s on one core
# at this limit, a 50-layer chain at 80% of its peak takes 0.1 s).
MAX_CELLS = 4_000_000
MAX_WORK = 30_000_000


def chain_fits(n: int, budget: int) -> bool:
    """Whether solve_chain takes `n` layers in `budget` units (MAX_CELLS and MAX_WORK)."""
    cells = (n + 2) ** 2 * (max(budget, 0) + 1)
    return cells <= MAX_CELLS and cells * (n + 2) // 3 <= MAX_WORK


def solve_chain(af: Sequence[float], ab: Sequence[float], bf: Sequence[int],
                bb: Sequence[int], budget: int) -> ChainSolution | None:
    """The DP of REFERENCES.md for a chain of N = len(ab) - 1 layers in `budget` units.

    Every memory size m is solved at once (numpy arrays over m = 0..budget - bf[0] and the
    splits k): the recurrence for (i, j, m) reads (k > i, j, m' <= m) and (i, k < j, m), so i
    descending and j ascending with k and m inside visit them in an order the pseudo-code's
    m-outer loops agree with; its results are the same (_split). Raises ValueError past
    chain_fits."""
    n = len(ab) - 1
    top = budget - bf[0]
    if top < 0:
        return None
    if not chain_fits(n, top):
        raise ValueError(f"a chain of {n} layers in {budget} units is past the DP's limits")
    size, width = n + 2, top + 1
    m = np.arange(width)
    bf_units = np.asarray(bf, dtype=np.int64)
    B = np.full((size, size, width), UNSET, dtype=np.int64)  # peaks; UNSET: no schedule
    C = np.full((size, size, width), math.inf)
    D = np.full((size, size, width), NONE, dtype=np.int64)
    for i in range(n, -1, -1):
        b = bb[i] + bb[i + 1]
        fits = m >= b  # below b nothing of (i, j >= i + 1) exists
        B[i, i + 1, fits], C[i, i + 1, fits], D[i, i + 1, fits] = b, ab[i], LEAF
        fcq, cq, fpq, pq = 0.0, ab[i], 0, b
        for j in range(i + 2, n + 2):
            fcq += af[j - 1]
            cq += fcq + ab[j - 1]
            fpq = max(fpq, (0 if j - 2 == i else bf[j - 2]) + bf[j - 1])
            pq = max(pq, bb[j] + fpq, bf[j - 1] + bb[j] + bb[j - 1])
            _split(B, C, D, af, bf_units, bb, i, j, b, m)
            quad = fits & (C[i, j] == math.inf) & (m >= pq)
            B[i, j, quad], C[i, j, quad], D[i, j, quad] = pq, cq, QUAD
            # REFERENCES.md's pseudo-code marks every (i, j' >= j, m) failed where (i, j, m)
            # fails and stops the j loop; with uneven sizes that is wrong ((i, j + 1) may hold a
            # smaller b_(j+1) where (i, j) holds b_j during its forwards), so we go on.
    peak = int(B[0, n + 1, top])
    if peak == UNSET:
        return None
    return ChainSolution(float(C[0, n + 1, top]), peak + bf[0], D)


def _split(B: np.ndarray, C: np.ndarray, D: np.ndarray, af: Sequence[float],
           bf: np.ndarray, bb: Sequence[int], i: int, j: int, b: int, m: np.ndarray) -> None:
    """(i, j, every m) by its best split k, all k at once: a k serves m when m holds b_j and
    the forwards' largest pair up to k (fpk, which only grows with k), f_k, and b; the first k
    of least cost wins, as in the pseudo-code's k loop (fck summed in the same order)."""
    ks = np.arange(i + 1, j)
    pairs = bf[ks] + np.where(ks - 1 == i, 0, bf[ks - 1])
    fpk = np.maximum.accumulate(pairs)
    low = np.maximum(np.maximum(bb[j] + fpk, bf[ks]), b)
    rest = np.maximum(m[None, :] - bf[ks][:, None], 0)
    right, left = B[ks[:, None], j, rest], B[i, ks, :]
    usable = (m[None, :] >= low[:, None]) & (right != UNSET) & (left != UNSET)
    fck = np.cumsum(np.asarray(af, dtype=np.float64)[ks])
    cost = np.where(usable, fck[:, None] + C[ks[:, None], j, rest] + C[i, ks, :], math.inf)
    first = np.argmin(cost, axis=0)
    best = cost[first, m]
    found = best < math.inf
    at, k = m[found], first[found]
    C[i, j, at], D[i, j, at] = best[found], ks[k]
    B[i, j, at] = np.maximum(np.maximum(bb[j] + fpk[k], bf[ks[k]] + right[k, at]), left[k, at])


def chain_schedule(graph: Graph, chain: Chain, solution: ChainSolution, budget: int,
                   device: str = "cpu") -> Schedule:
    """Execute the DP policy (REFERENCES.md's Exec) as compute events; frees by liveness."""
    n = len(chain.ab) - 1
    done: set[int] = set()
    events: list[Event] = []

    def compute(op: int) -> None:
        events.append(Compute(op, device, recompute=op in done))
        done.add(op)

    def forwards(i: int, k: int) -> None:
        for layer in range(i + 1, k + 1):
            compute(chain.forward_ops[layer - 1])

    def run(i: int, j: int, m: int) -> None:
        action = int(solution.policy[i, j, m])
        if j == i + 1 or action == LEAF:
            compute(chain.backward_ops[i])
        elif action == QUAD:
            for layer in range(j - 1, i - 1, -1):
                forwards(i, layer)
                compute(chain.backward_ops[layer])
        else:
            forwards(i, action)
            run(action, j, m - chain.bf[action])
            run(i, action, m)

    run(0, n + 1, budget - chain.bf[0])
    home = home_on(graph, device)
    return Schedule(events=tuple(free_after_last_read(graph, events, home)), home=home)
