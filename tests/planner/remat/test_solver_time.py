"""The solver phase starts nothing its time cannot hold: building a stage model costs seconds on
large graphs (UNet-small: 1.5 s each, the repair's and the solve's), and CP-SAT's presolve does
not stop at a 0.1 s limit, so a phase entered with no time left once took a 1.6 s remat solve
to 7 s. Without the time, the answer says what was skipped and claims no bound."""

from __future__ import annotations

from planner.remat.rematerialize import plan_remat
from planner.remat.solve import solve_problem
from tests.planner.remat.test_in_place_model import (
    UNIT,
    activation_chain,
    problem_of,
    replayed_and_modelled,
)


def test_no_time_left_builds_no_repair_and_runs_no_cpsat():
    graph, costs, problem = problem_of(activation_chain(late_reader=False))
    replayed, _ = replayed_and_modelled(graph, costs, problem)
    budget = {"cpu": replayed // UNIT}
    # Without heuristics (as plan_remat calls it) the repair finds the schedule, given time.
    given_time = solve_problem(problem, budget, time_limit=5, use_heuristics=False)
    assert given_time.status in ("OPTIMAL", "FEASIBLE")
    solution = solve_problem(problem, budget, time_limit=0.0, use_heuristics=False)
    assert solution.status == "UNKNOWN" and solution.bound is None
    assert any(note.startswith("no repair") for note in solution.notes)
    assert "no time left for CP-SAT after building its model" in solution.notes
    assert "cpsat_status" not in solution.stats


def test_plan_remat_skips_the_solver_once_its_share_is_spent():
    graph, costs, _ = problem_of(activation_chain(late_reader=False))
    order = list(range(len(graph.ops)))
    budget = {"cpu": 1 << 20}
    result = plan_remat(graph, order, budget, costs, time_limit=0.01, memory_unit=UNIT)
    assert result.best is not None  # the heuristics still answer
    assert result.model.status is None
    assert any(note.startswith("no CP-SAT:") for note in result.notes)
    given_time = plan_remat(graph, order, budget, costs, time_limit=5, memory_unit=UNIT)
    assert given_time.model.status is not None
