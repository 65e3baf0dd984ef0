"""build_plan makes the plan's buffers and steps without pydantic's validation
(planner.plan.builder._trusted): they must be the very models validating the plan's JSON makes,
field for field, of the same types and in the schema's order (the JSON follows it). And the
validator, which re-checks such a plan, says what is wrong with a copy of an unknown buffer
instead of failing while it predicts the step time."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from planner.ir.graph import Graph, load_graph
from planner.ir.graph_json import graph_from_node_link
from planner.memory.schedule import Compute, Copy, Free, Schedule, sequential_schedule
from planner.plan.builder import build_plan
from planner.plan.validate import validate_plan
from schemas.plan import CopyStep, Plan, PlanRequest
from schemas.profile import CopyFit, Profile
from tests.support.chains import chain_json
from tests.support.fixture_zoo import model_path

HOSTS = ("cpu", "cpu:1")


def _plan(graph: Graph, schedule: Schedule, devices: tuple[str, ...] = ("cpu",)) -> Plan:
    request = PlanRequest(budgets=dict.fromkeys(devices, 1 << 40), time_limit_s=5)
    return build_plan(graph, schedule, request, plan_id="t", planner_version="t").plan


def _chain_with_a_copy() -> tuple[Graph, Plan, Profile]:
    """A 30-op chain run on cpu whose first value is also copied to a second host arena (and
    freed there): a plan with compute, copy and free steps. Its profile prices that copy."""
    graph, profile = graph_from_node_link(chain_json(random.Random(2), 15))
    schedule = sequential_schedule(graph, range(len(graph.ops)), "cpu")
    value = next(t for t in graph.ops[0].output_ids)
    events = list(schedule.events)
    after = events.index(Compute(graph.ops[0].id, "cpu")) + 1
    events[after:after] = [Copy(value, *HOSTS), Free(value, HOSTS[1])]
    fit = CopyFit(src=HOSTS[0], dst=HOSTS[1], latency_seconds=1e-6, bytes_per_second=1e10,
                  method="test: an assumed host-to-host copy")
    plan = _plan(graph, Schedule(tuple(events), schedule.home), HOSTS)
    return graph, plan, profile.model_copy(update={"copies": [fit]})


def _fixture_plan(name: str) -> Plan:
    graph = load_graph(model_path(name))
    return _plan(graph, sequential_schedule(graph, range(len(graph.ops)), "cpu"))


@pytest.mark.parametrize("make", [lambda: _fixture_plan("mlp_sgd"),
                                  lambda: _fixture_plan("cnn_bn_momentum"),
                                  lambda: _chain_with_a_copy()[1]],
                         ids=["mlp_sgd", "cnn_bn_momentum", "chain-with-a-copy"])
def test_built_buffers_and_steps_are_what_validating_them_makes(make: Callable[[], Plan]
                                                               ) -> None:
    plan = make()
    text = plan.model_dump_json()
    validated = Plan.model_validate_json(text)
    assert validated == plan and validated.model_dump_json() == text
    made = [*plan.buffers, *plan.steps]
    checked = [*validated.buffers, *validated.steps]
    assert len(made) == len(checked)
    for ours, theirs in zip(made, checked, strict=True):
        assert type(ours) is type(theirs)
        assert list(ours.__dict__) == list(type(ours).model_fields)
        assert ([type(v) for v in ours.__dict__.values()]
                == [type(v) for v in theirs.__dict__.values()]), ours
        assert ours.model_fields_set == set(type(ours).model_fields)


def test_the_copy_plan_validates_with_its_predicted_time() -> None:
    graph, plan, profile = _chain_with_a_copy()
    report = validate_plan(graph, plan, profile)
    assert report.ok, report.errors[:3]
    assert any(isinstance(s, CopyStep) for s in plan.steps)
    assert report.predicted_seconds is not None and report.predicted_seconds > 0


def test_a_copy_into_an_unknown_buffer_is_reported_not_raised() -> None:
    graph, plan, profile = _chain_with_a_copy()
    steps = [s.model_copy(update={"dst": "nowhere"}) if isinstance(s, CopyStep) else s
             for s in plan.steps]
    report = validate_plan(graph, plan.model_copy(update={"steps": steps}), profile)
    assert any("writes unknown buffer nowhere" in e for e in report.errors), report.errors
    assert report.predicted_seconds is None
