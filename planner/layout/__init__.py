"""Arena layout: an offset for every buffer with a known lifetime in one device arena.

OLLA's "location" instance (Steiner et al. 2022, section 3.3) for fixed lifetimes: buffers are
rectangles in time x address, lifetimes fixed, offsets chosen so that buffers live at a common
step never share bytes, and the arena (the highest end) is as small as possible. Heuristics
(greedy by size, best fit, OLLA's pyramid) give a warm start; a CP-SAT model closes the gap to
the live-bytes lower bound or proves how far it is.

    plan_layout(buffers, *, alignment=64, capacity=None, time_limit=10.0, workers=1, seed=0)
    lower_bound(buffers, alignment=64)
    check_layout(buffers, layout, alignment=64) -> list of violations
    read_buffers_csv / parse_buffers_csv / write_layout_csv / format_layout_csv
"""

from planner.layout.bounds import lower_bound
from planner.layout.checker import check_layout
from planner.layout.choose import heuristic_layout, plan_layout
from planner.layout.csv_io import (
    CSV_DEFAULT_ALIGNMENT,
    format_layout_csv,
    parse_buffers_csv,
    read_buffers_csv,
    write_layout_csv,
)
from planner.layout.types import (
    DEFAULT_ALIGNMENT,
    STATUS_FEASIBLE,
    STATUS_INFEASIBLE,
    STATUS_OPTIMAL,
    Buffer,
    Layout,
)

__all__ = [
    "CSV_DEFAULT_ALIGNMENT",
    "DEFAULT_ALIGNMENT",
    "STATUS_FEASIBLE",
    "STATUS_INFEASIBLE",
    "STATUS_OPTIMAL",
    "Buffer",
    "Layout",
    "check_layout",
    "format_layout_csv",
    "heuristic_layout",
    "lower_bound",
    "parse_buffers_csv",
    "plan_layout",
    "read_buffers_csv",
    "write_layout_csv",
]
