"""The HTML report of a stored plan (`GET /plans/{id}/report`): planner.report over the store.

The stored model, when still there, adds the forward/backward/optimizer regions to the page.
"""

from __future__ import annotations

from pathlib import Path

from planner.ir.graph import load_graph
from planner.report import render_report_html
from schemas.plan import Plan


def render_stored_report(plan_json: str, model_path: Path) -> str:
    plan = Plan.model_validate_json(plan_json)
    graph = load_graph(model_path, dims=plan.request.dims) if model_path.exists() else None
    return render_report_html(plan, graph)
