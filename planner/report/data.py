"""Everything the report shows, extracted from a plan (and optionally its model) once.

The HTML page (planner.report.page) and the PNG export (planner.report.png) both draw from this;
neither reads the plan itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.ir.graph import Graph
from planner.report.arena import ArenaMap, arena_maps
from planner.report.index import index_plan
from planner.report.matrix import ScheduleMatrix, schedule_matrices
from planner.report.memory import MemoryCurve, memory_curves
from planner.report.overview import PlanSummary, step_rows, summarize_plan
from schemas.plan import Plan


@dataclass(frozen=True)
class ReportLimits:
    """How much detail the page draws before it downsamples (and says so)."""

    curve_points: int = 2000
    matrix_rows: int = 400
    matrix_cols: int = 1000
    matrix_runs: int = 40_000
    arena_rects: int = 20_000


@dataclass(frozen=True)
class ReportData:
    summary: PlanSummary
    memory: list[MemoryCurve]
    matrices: list[ScheduleMatrix]
    arenas: list[ArenaMap]
    steps: list[list]  # overview.step_rows


def build_report_data(plan: Plan, graph: Graph | None = None,
                      limits: ReportLimits | None = None) -> ReportData:
    """Extract the report's figures and tables; `graph` (the plan's model) adds op regions.

    Raises index.ReportInputError when `graph` is not the model the plan was made for.
    """
    limits = limits or ReportLimits()
    index = index_plan(plan, graph)
    curves = memory_curves(index, limits.curve_points)
    return ReportData(
        summary=summarize_plan(index, curves, graph),
        memory=curves,
        matrices=schedule_matrices(index, limits.matrix_rows, limits.matrix_cols,
                                   limits.matrix_runs),
        arenas=arena_maps(index, limits.arena_rects),
        steps=step_rows(index),
    )
