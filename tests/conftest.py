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


@pytest.fixture
def without_late_recompute(private_profile_cache, monkeypatch, tmp_path_factory):
    """ONNX Runtime's extended rewrite without our late recomputation (schemas.late_recompute),
    in a cache of its own (the rewrites' cache knows their source, not a function replaced at run
    time; set after the shared one): for scenario tests whose orders and budgets were measured on
    those graphs, and which check a mechanism of the search rather than the graph's figures."""
    from schemas import optimized_graph

    monkeypatch.setattr(optimized_graph, "recompute_for_late_readers", lambda data: data)
    monkeypatch.setenv("ARENAPLAN_CACHE_DIR",
                       str(tmp_path_factory.getbasetemp() / "cache-without-late-recompute"))
