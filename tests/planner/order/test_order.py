"""Operator ordering: exact memory model, heuristics, the OLLA model, checked by brute force."""

from __future__ import annotations

import itertools

import pytest

from planner.ir.graph import load_graph
from planner.memory.liveness import check_order, lifetimes, order_lower_bound
from planner.order import optimize_order
from planner.order.heuristics import file_order, memory_greedy_order
from planner.order.olla_ilp import solve_lifetimes
from tests.support.onnx_builders import random_dag, tiny_momentum_step


def all_topological_orders(graph):
    preds = {
        op.id: {graph.tensors[t].producer for t in op.input_ids} - {None} for op in graph.ops
    }
    for perm in itertools.permutations(range(len(graph.ops))):
        seen = set()
        ok = True
        for op in perm:
            if not preds[op] <= seen:
                ok = False
                break
            seen.add(op)
        if ok:
            yield list(perm)


def brute_force_peak(graph):
    return min(lifetimes(graph, order).peak for order in all_topological_orders(graph))


def test_lifetimes_by_hand():
    graph = load_graph(tiny_momentum_step(), dims={"batch": 2})
    life = lifetimes(graph, file_order(graph))
    x, loss = graph.tensor("x"), graph.tensor("loss")
    w, w_new, m_new = graph.tensor("W"), graph.tensor("W_new"), graph.tensor("m_new")
    assert (life.first[x.id], life.last[x.id]) == (0, 5)  # read last by Transpose (op 5)
    assert (life.first[loss.id], life.last[loss.id]) == (3, 10)  # outputs live to the end
    # State is persistent and its new value is written in place (elementwise Sub / Add).
    assert (life.first[w.id], life.last[w.id]) == (0, 10)
    in_state = {w_new.id: w.id, m_new.id: graph.tensor("m").id}
    assert in_state.items() <= life.alias.items()  # besides elementwise temporaries in place
    constants = 3 * 4
    assert life.live_bytes[10] == constants + 48 + 48 + 4 + 48  # W, m, loss, delta


def test_in_place_update_needs_every_other_read_first():
    graph = load_graph(tiny_momentum_step(late_reader_of_w=True), dims={"batch": 2})
    w, w_new = graph.tensor("W"), graph.tensor("W_new")
    in_file_order = lifetimes(graph, file_order(graph))  # the probe reads W after the update
    assert in_file_order.alias.get(w_new.id) != w.id  # (it may go over its dying `delta`)
    greedy = memory_greedy_order(graph)  # respects read-before-update edges
    assert lifetimes(graph, greedy).alias.get(w_new.id) == w.id
    exact = solve_lifetimes(graph, time_model="sequential", time_limit=5)
    assert lifetimes(graph, exact.order).alias.get(w_new.id) == w.id


def test_check_order_rejects_bad_orders():
    graph = load_graph(tiny_momentum_step(), dims={"batch": 2})
    with pytest.raises(ValueError, match="every op"):
        check_order(graph, [0, 1])
    with pytest.raises(ValueError, match="before the producer"):
        check_order(graph, [1, 0, *range(2, 11)])


@pytest.mark.parametrize("seed", range(12))
def test_orders_against_brute_force(seed):
    graph = load_graph(random_dag(seed, n_ops=7))
    optimum = brute_force_peak(graph)
    lower = order_lower_bound(graph)
    assert lower <= optimum
    for order in (file_order(graph), memory_greedy_order(graph)):
        check_order(graph, order)
        assert lifetimes(graph, order).peak >= optimum
    levelized = solve_lifetimes(graph, time_model="levels", time_limit=5)
    assert levelized.status == "OPTIMAL"
    check_order(graph, levelized.order)
    # Sequentializing a levelized schedule never costs more than the model's objective.
    assert optimum <= lifetimes(graph, levelized.order).peak <= levelized.objective
    exact = solve_lifetimes(graph, time_model="sequential", time_limit=5)
    assert exact.status == "OPTIMAL"
    check_order(graph, exact.order)
    # The sequential model relaxes in-place writes: its bound holds for every order, its
    # objective never exceeds its order's peak.
    assert exact.bound <= optimum <= lifetimes(graph, exact.order).peak
    assert exact.objective <= lifetimes(graph, exact.order).peak
    result = optimize_order(graph, time_limit=5)
    check_order(graph, result.order)
    assert result.lower_bound_bytes <= optimum <= result.peak_bytes
    assert result.status == ("OPTIMAL" if result.peak_bytes <= result.lower_bound_bytes
                             else "FEASIBLE")
    assert result.peak_bytes == lifetimes(graph, result.order).peak


def test_optimize_order_reports_its_work():
    graph = load_graph(random_dag(3, n_ops=12))
    result = optimize_order(graph, time_limit=5)
    assert set(result.candidates) >= {"file", "greedy"}
    assert result.method in result.candidates
    assert result.peak_bytes == min(result.candidates.values())
    if result.solver:
        assert result.solver["status"] in {"OPTIMAL", "FEASIBLE"}
        assert result.solver["bound"] <= result.solver["objective"]


@pytest.mark.parametrize("seed", range(6))
def test_window_problem_reproduces_the_live_bytes_of_the_window(seed):
    import random

    from planner.order.olla_ilp import solve_lifetime_problem
    from planner.order.refine import window_problem

    graph = load_graph(random_dag(seed, n_ops=14))
    order = memory_greedy_order(graph)
    life = lifetimes(graph, order)
    rng = random.Random(seed)
    start = rng.randint(0, 6)
    stop = start + rng.randint(3, 8)
    problem, ops = window_problem(graph, order, life, start, stop)
    assert ops == order[start:stop]
    # Fixing the window to its current order must give exactly its current maximum.
    pinned = type(problem)(
        steps=problem.steps, asap=list(range(problem.steps)), alap=list(range(problem.steps)),
        one_op_per_step=True, tensors=problem.tensors, baseline=problem.baseline,
        edges=problem.edges,
    )
    solution = solve_lifetime_problem(pinned, time_limit=5)
    assert solution.objective == max(life.live_bytes[start:stop])


def test_refinement_only_ever_lowers_the_peak():
    from planner.order.refine import refine_order

    for seed in range(4):
        graph = load_graph(random_dag(seed, n_ops=30))
        start = file_order(graph)
        refined, _ = refine_order(graph, start, window=10, time_limit=5)
        check_order(graph, refined)
        assert lifetimes(graph, refined).peak <= lifetimes(graph, start).peak
