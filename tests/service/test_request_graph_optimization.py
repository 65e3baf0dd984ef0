"""The service plans ONNX Runtime's optimized graph when a request does not say
(schemas.optimized_graph.SERVICE_DEFAULT), and the level is part of the plan id."""

from __future__ import annotations

import json

from planner.version import PLANNER_VERSION
from schemas.optimized_graph import SERVICE_DEFAULT
from schemas.plan import compute_plan_id
from service.settings import load_settings
from service.upload import parse_plan_request


def test_a_request_that_does_not_say_gets_the_service_default():
    settings = load_settings()
    bare = parse_plan_request(json.dumps({"budgets": {"cpu": 2**30}}).encode(), settings)
    assert bare.graph_optimization == SERVICE_DEFAULT == "extended"
    off = parse_plan_request(
        json.dumps({"budgets": {"cpu": 2**30}, "graph_optimization": "disable"}).encode(),
        settings)
    assert off.graph_optimization == "disable"
    assert compute_plan_id("a" * 64, bare, PLANNER_VERSION) != compute_plan_id(
        "a" * 64, off, PLANNER_VERSION)
