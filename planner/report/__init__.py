"""The plan report: what a memory plan does, as figures a person can judge at a glance.

- `render_report_html(plan, graph=None)`: one self-contained HTML page (inline CSS, SVG and
  script; it fetches nothing) with a summary, memory in use per device over the steps with the
  budget line (XEngine Fig. 4), the compute/keep matrices per device (Checkmate's R/S, with
  recomputations highlighted), the arena maps (OLLA: buffers as step x offset rectangles coloured
  by role) and the step list. `arenaplan report` and the service serve it.
- `export_pngs(data, out_dir)`: the same figures as PNG files via matplotlib (optional extra
  `report`), for papers and CI artifacts.

Modules: index (lookups over the plan), memory / matrix / arena / overview (one extraction
each), data (all of them together), svg + figures (drawing), assets + page (the HTML page),
png (the matplotlib export), palette (colours shared by both renderers).
"""

from planner.report.data import ReportData, ReportLimits, build_report_data
from planner.report.index import ReportInputError
from planner.report.page import render_report_html
from planner.report.png import MissingDependencyError, export_pngs

__all__ = [
    "MissingDependencyError",
    "ReportData",
    "ReportInputError",
    "ReportLimits",
    "build_report_data",
    "export_pngs",
    "render_report_html",
]
