"""The HTML report of a stored plan (`GET /plans/{id}/report`): planner.report over the store.

The stored model, when still there, adds the forward/backward/optimizer regions to the page; a
stored model whose bytes no longer match its sha256 raises `DamagedBlobError` rather than being
parsed (it may not parse, or describe another graph).
"""

from __future__ import annotations

from planner.ir.graph import load_plan_graph
from planner.report import render_report_html
from schemas.plan import Plan
from service.blobs import ModelBlobs


def render_stored_report(plan_json: str, blobs: ModelBlobs, model_sha256: str) -> str:
    plan = Plan.model_validate_json(plan_json)
    graph = None
    if blobs.exists(model_sha256):
        blobs.check_intact(model_sha256)
        graph = load_plan_graph(blobs.path_for(model_sha256), plan)
    return render_report_html(plan, graph)
