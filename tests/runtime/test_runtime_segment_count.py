"""Fewer, larger segments (issue 16 item 3): a one-device plan whose order the host sessions
keep runs as one segment however many compute steps it has; a cap, when asked for, splits it."""

from __future__ import annotations

from runtime.segments import Segment, group_steps
from schemas.plan import ComputeStep
from tests.support.runtime_plans import full_budget_plan


def segments_of(name: str, **options) -> list[Segment]:
    plan = full_budget_plan(name)
    buffers = {b.id: b for b in plan.buffers}
    units = group_steps(plan.steps, buffers, order_kept={"cpu"}, **options)
    return [u for u in units if isinstance(u, Segment)]


def test_a_long_plan_is_one_segment():
    plan = full_budget_plan("resnet18_narrow")
    computes = [i for i, s in enumerate(plan.steps) if isinstance(s, ComputeStep)]
    assert len(computes) > 1024  # more than the former cap
    (segment,) = segments_of("resnet18_narrow")
    assert segment.steps == computes


def test_a_cap_still_splits_when_asked():
    capped = segments_of("resnet18_narrow", max_segment=1024)
    assert [len(s.steps) for s in capped][:1] == [1024] and len(capped) == 2
