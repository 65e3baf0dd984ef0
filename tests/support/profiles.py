"""Profiles for tests that need costs without a GPU: one measured on the CPU (quick policy, no
cache), and copies of it with other costs or with the CPU's costs under another device's name."""

from __future__ import annotations

from planner.ir.graph import load_graph
from planner.profile.runner import profile_graph
from planner.profile.timing import QUICK_POLICY
from schemas.profile import Profile
from tests.support.fixture_zoo import model_path


def measured_profile(model: str) -> Profile:
    return profile_graph(load_graph(model_path(model)), ["cpu"], policy=QUICK_POLICY, cache=None)


def scaled(profile: Profile, factor: float) -> Profile:
    """Every cost times `factor` (plus a microsecond, so that zero costs change too)."""
    return profile.model_copy(update={"ops": [
        op.model_copy(update={"costs": {device: cost.model_copy(
            update={"median_seconds": factor * cost.median_seconds + 1e-6})
            for device, cost in op.costs.items()}})
        for op in profile.ops]})


def renamed(profile: Profile, device: str) -> Profile:
    """The CPU's costs labelled as `device` (a stand-in for a GPU profile)."""
    return profile.model_copy(update={"devices": [device], "ops": [
        op.model_copy(update={"costs": {device: op.costs["cpu"]} if "cpu" in op.costs else {},
                              "unsupported": {}})
        for op in profile.ops]})
