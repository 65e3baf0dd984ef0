"""Fast layout heuristics (warm starts for the exact model), and the chooser that keeps the best.

- greedy_by_size: largest first, lowest offset that fits (TFLite's and XLA's greedy by size).
- greedy_by_area: largest size x lifetime first, lowest offset (one of XLA's orders).
- best_fit: in order of allocation time, the tightest free gap (an online best-fit allocator,
  as ONNX Runtime's memory pattern, but with the future known, so pre-placed buffers are avoided).
- pyramid: OLLA's pre-placement (Steiner et al. 2022, section 4.5, Function 5): a chain of
  nested long-lived buffers, longest first, stacked at increasing addresses; the rest greedy by
  size around it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from planner.layout.placement import place_in_order
from planner.layout.problem import LayoutProblem, arena_units


@dataclass(frozen=True)
class HeuristicResult:
    method: str
    offsets: np.ndarray  # units, every buffer
    arena: int  # units


def _order(problem: LayoutProblem, *keys: np.ndarray) -> np.ndarray:
    """Free buffers sorted by ``keys`` (first key most significant), ties by index."""
    free = problem.free_idx
    return free[np.lexsort((free, *[k[free] for k in reversed(keys)]))]


def greedy_by_size(problem: LayoutProblem) -> np.ndarray:
    duration = problem.upper - problem.lower
    return place_in_order(
        problem, _order(problem, -problem.size, -duration, problem.lower), "first"
    )


def greedy_by_area(problem: LayoutProblem) -> np.ndarray:
    duration = problem.upper - problem.lower
    return place_in_order(
        problem, _order(problem, -problem.size * duration, -problem.size, problem.lower), "first"
    )


def best_fit(problem: LayoutProblem) -> np.ndarray:
    duration = problem.upper - problem.lower
    return place_in_order(
        problem, _order(problem, problem.lower, -problem.size, -duration), "best"
    )


def pyramid_chain(problem: LayoutProblem) -> list[int]:
    """OLLA Function 5: repeatedly take the longest-lived unprocessed buffer whose lifetime lies
    inside the previous one's ([min_start, max_end]), so the chain forms a pyramid."""
    free = problem.free_idx
    lo = problem.lower[free]
    hi = problem.upper[free]
    duration = hi - lo
    # ties between equally long buffers: the larger first, then input order
    rank = np.lexsort((free, -problem.size[free], -duration))
    lo, hi, duration, members = lo[rank], hi[rank], duration[rank], free[rank]
    taken = np.zeros(len(members), dtype=bool)
    chain: list[int] = []
    min_start, max_end = np.iinfo(np.int64).min, np.iinfo(np.int64).max
    while True:
        ok = np.flatnonzero((lo >= min_start) & (hi <= max_end) & ~taken)
        if len(ok) == 0:
            break
        k = int(ok[0])  # members are sorted by decreasing duration
        taken[k] = True
        chain.append(int(members[k]))
        min_start, max_end = int(lo[k]), int(hi[k])
    return chain


def pyramid(problem: LayoutProblem) -> np.ndarray:
    chain = pyramid_chain(problem)
    in_chain = np.zeros(problem.n, dtype=bool)
    in_chain[chain] = True
    duration = problem.upper - problem.lower
    rest = _order(problem, -problem.size, -duration, problem.lower)
    rest = rest[~in_chain[rest]]
    return place_in_order(problem, np.concatenate((np.asarray(chain, dtype=np.int64), rest)))


HEURISTICS: dict[str, Callable[[LayoutProblem], np.ndarray]] = {
    "greedy_by_size": greedy_by_size,
    "best_fit": best_fit,
    "pyramid": pyramid,
    "greedy_by_area": greedy_by_area,
}


def run_heuristics(
    problem: LayoutProblem, target: int | None = None, methods: tuple[str, ...] | None = None
) -> list[HeuristicResult]:
    """Run the heuristics in order, stopping early once one reaches ``target`` (units).

    Returns every result computed, best (smallest arena, earliest on ties) first.
    """
    results: list[HeuristicResult] = []
    for name in methods or tuple(HEURISTICS):
        offsets = HEURISTICS[name](problem)
        results.append(HeuristicResult(name, offsets, arena_units(problem, offsets)))
        if target is not None and results[-1].arena <= target:
            break
    return sorted(results, key=lambda r: r.arena)
