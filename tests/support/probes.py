"""The budgets the least-peak bisection's probes aim at (planner.remat.smallest._probe), recorded
for tests of where it aims and whether it searches at all."""

from __future__ import annotations

import pytest

from planner.remat import smallest


def record_probe_aims(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A list that gets the budget of every probe run from now on in the calling test."""
    aims: list[int] = []
    probe = smallest._probe

    def recorded(graph, orders, device, costs, budget, memory_unit, deadline):
        aims.append(budget)
        return probe(graph, orders, device, costs, budget, memory_unit, deadline)

    monkeypatch.setattr(smallest, "_probe", recorded)
    return aims
