"""Empty tensors take arena bytes, and the remat model counts them.

mlp_sgd holds a 0-byte constant. The arena gives it an address (one alignment unit), so the
replay counts 64 B; the remat model once counted nothing, and CP-SAT returned a two-device
schedule that its model put at the budget and whose replay was 64 B over it (CI, stop 29).
"""

from __future__ import annotations

from planner.ir.graph import load_graph
from planner.memory.simulate import simulate
from planner.memory.zones import buffer_bytes
from planner.profile.costs import costs_from_profile
from planner.remat.decision import evaluate
from planner.remat.emit import emit_schedule
from planner.remat.policies import execute, sqrt_checkpoints
from planner.remat.problem import RematOptions, build_problem
from tests.support.fixture_zoo import model_path
from tests.support.profiles import measured_profile

UNIT = 64


def test_an_empty_tensor_takes_one_unit():
    assert buffer_bytes(0, UNIT) == UNIT
    assert buffer_bytes(1, UNIT) == UNIT
    assert buffer_bytes(65, UNIT) == 2 * UNIT


def test_the_models_peak_never_undercounts_the_replay_of_its_decision():
    graph = load_graph(model_path("mlp_sgd"))
    assert any(t.nbytes == 0 for t in graph.tensors), "the fixture no longer has an empty tensor"
    costs = costs_from_profile(measured_profile("mlp_sgd"), graph, ["cpu"])
    problem = build_problem(graph, range(len(graph.ops)), costs, devices=["cpu"], home="cpu",
                            options=RematOptions(memory_unit=UNIT))
    for run in (execute(problem, "cpu", "keep"),
                execute(problem, "cpu", "checkpoints", checkpoints=sqrt_checkpoints(problem))):
        assert run.decision is not None
        modelled = evaluate(problem, run.decision).peaks["cpu"] * UNIT
        replayed = simulate(graph, emit_schedule(problem, run.decision), costs,
                            alignment=UNIT).peaks["cpu"]
        assert modelled >= replayed
