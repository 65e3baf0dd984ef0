"""The two data types of the layout instance: a buffer with a known lifetime, and a layout of them.

A buffer is live in the half-open step range ``[lower, upper)``; two buffers conflict when these
ranges intersect, and conflicting buffers must occupy disjoint address ranges of the arena.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Literal

STATUS_OPTIMAL: Final = "OPTIMAL"
STATUS_FEASIBLE: Final = "FEASIBLE"
STATUS_INFEASIBLE: Final = "INFEASIBLE"
# A layout always exists (the heuristics place everything), proven minimal or not.
LayoutStatus = Literal["OPTIMAL", "FEASIBLE"]

DEFAULT_ALIGNMENT = 64


@dataclass(frozen=True)
class Buffer:
    """One buffer to place.

    ``lower``/``upper``: the half-open lifetime ``[lower, upper)`` in steps.
    ``size``: bytes; the buffer occupies its size rounded up to its alignment.
    ``alignment``: bytes (a power of two); None means the planner's default alignment.
    ``offset``: a pre-placed (fixed) offset that the planner must respect; None means free.
    ``zone``: a persistent zone name (e.g. "persistent"): zone buffers are placed contiguously,
    zone after zone, at the bottom of the arena, and their zone is reserved for the whole step.
    """

    id: str
    lower: int
    upper: int
    size: int
    alignment: int | None = None
    offset: int | None = None
    zone: str | None = None


@dataclass(frozen=True)
class Layout:
    """An offset for every buffer, and how good the arena is.

    ``arena_size``: bytes, the end of the highest buffer (sizes rounded up to alignment).
    ``lower_bound``: the best proven lower bound on the arena size (the live-bytes bound, raised
    by the exact solver's bound when it ran); ``arena_size == lower_bound`` means proven optimal.
    ``live_bytes_bound``: the plain max-over-time live-bytes bound, see `lower_bound()`.
    ``gap``: ``(arena_size - lower_bound) / lower_bound`` (0.0 for an empty instance).
    ``method``: the algorithm whose placement was kept ("greedy_by_size", "best_fit",
    "pyramid", ... "hot_window" (planner.layout.window), "canonical" (planner.layout.canonical),
    "bands" (planner.layout.bands) or "cpsat"). ``timed_out``: the
    exact solver stopped at its time limit.
    """

    offsets: dict[str, int] = field(hash=False)
    arena_size: int
    lower_bound: int
    status: LayoutStatus
    method: str
    solve_seconds: float
    timed_out: bool = False
    live_bytes_bound: int = 0

    @property
    def gap(self) -> float:
        if self.lower_bound <= 0:
            return 0.0
        return (self.arena_size - self.lower_bound) / self.lower_bound

    @property
    def is_optimal(self) -> bool:
        return self.status == STATUS_OPTIMAL

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready summary with the offsets (the gap included)."""
        return {
            "offsets": dict(self.offsets),
            "arena_size": self.arena_size,
            "lower_bound": self.lower_bound,
            "live_bytes_bound": self.live_bytes_bound,
            "gap": self.gap,
            "status": self.status,
            "method": self.method,
            "solve_seconds": self.solve_seconds,
            "timed_out": self.timed_out,
        }
