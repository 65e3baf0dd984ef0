"""Fixtures shared by test modules in different folders (helpers without fixtures live in
tests/support/)."""

from __future__ import annotations

import pytest


@pytest.fixture
def private_profile_cache(tmp_path_factory, monkeypatch):
    """Profiles measured by the planner go to one cache for the whole test session, not the
    user's: tests neither read stale costs from it nor leave theirs behind, and a fixture
    profiled by one test is reused by the next."""
    monkeypatch.setenv("ARENAPLAN_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))
