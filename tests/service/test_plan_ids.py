"""Plan ids mean one plan: everything that determines the plan is in the id, the profile's
content included (`schemas.plan.compute_plan_id`)."""

from __future__ import annotations

import hashlib

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


def test_a_measured_profile_is_part_of_the_id(two_profiles):
    request = PlanRequest(budgets={"cpu": 2**30})
    digests = [hashlib.sha256(p.model_dump_json().encode()).hexdigest() for p in two_profiles]
    ids = [compute_plan_id(SHA, request, PLANNER_VERSION, profile_sha256=d) for d in digests]
    assert ids[0] != ids[1]
    assert compute_plan_id(SHA, request, PLANNER_VERSION) not in ids
    assert compute_plan_id(SHA, request, PLANNER_VERSION, profile_sha256=digests[0]) == ids[0]


def test_a_request_with_a_profile_takes_no_second_digest(two_profiles):
    request = PlanRequest(budgets={"cpu": 2**30}, profile=two_profiles[0])
    with pytest.raises(ValueError, match="already in the id"):
        compute_plan_id(SHA, request, PLANNER_VERSION, profile_sha256="b" * 64)
