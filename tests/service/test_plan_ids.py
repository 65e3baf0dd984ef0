"""Plan ids mean one plan: a profile the request carries is in the id, every cost of it
(`schemas.plan.compute_plan_id`); a measured one is stored with the plan
(tests/service/test_plan_profile.py)."""

from __future__ import annotations

import pytest

from planner.version import PLANNER_VERSION
from schemas.plan import PlanRequest, compute_plan_id
from schemas.profile import Profile
from tests.support.profiles import measured_profile, scaled

SHA = "a" * 64


@pytest.fixture(scope="module")
def two_profiles() -> tuple[Profile, Profile]:
    """A measured profile of mlp_sgd, and the same with every cost doubled."""
    measured = measured_profile("mlp_sgd")
    return measured, scaled(measured, 2)


def test_a_profile_in_the_request_is_part_of_the_id(two_profiles):
    first, second = (PlanRequest(budgets={"cpu": 2**30}, profile=p) for p in two_profiles)
    bare = PlanRequest(budgets={"cpu": 2**30})
    ids = {compute_plan_id(SHA, r, PLANNER_VERSION) for r in (first, second, bare)}
    assert len(ids) == 3
