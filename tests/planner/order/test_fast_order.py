"""Fast ordering (issue 13, item 6): quick orders that scale, the just-in-time pass, and ordering
that stops as soon as more of it cannot pay."""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
import pytest
from onnx import helper, numpy_helper

from planner.ir.graph import load_graph
from planner.memory.liveness import check_order, lifetimes
from planner.order import optimize_order
from planner.order.heuristics import QUICK_ORDERS, file_order
from planner.order.just_in_time import just_in_time
from planner.order.refine import refine_order
from planner.order.running_bytes import RunningBytes
from planner.order.shrink_early import shrink_early
from planner.order.source_order import source_ranks
from planner.pipeline import plan_model
from schemas import optimized_graph
from schemas.plan import PlanRequest
from tests.support.fixture_zoo import model_path
from tests.support.onnx_builders import make_model, random_dag, tiny_momentum_step, value


def residual_blocks(blocks: int, width: int = 16):
    """`blocks` x (Transpose of a weight, MatMul, Relu, residual Add, Identity view): 5 ops each.

    All weight transposes come first in the file, as exporters put the backward pass's weight
    transposes in the forward pass; the Identity is a view and the Add may run in place."""
    weights = [numpy_helper.from_array(np.zeros((width, width), np.float32), f"w{i}")
               for i in range(blocks)]
    nodes = [helper.make_node("Transpose", [f"w{i}"], [f"wt{i}"]) for i in range(blocks)]
    x = "x"
    for i in range(blocks):
        nodes += [
            helper.make_node("MatMul", [x, f"wt{i}"], [f"h{i}"]),
            helper.make_node("Relu", [f"h{i}"], [f"r{i}"]),
            helper.make_node("Add", [f"r{i}", x], [f"a{i}"]),
            helper.make_node("Identity", [f"a{i}"], [f"x{i}"]),
        ]
        x = f"x{i}"
    return make_model(nodes, [value("x", [8, width])], [value(x, [8, width])], weights)


def small_graphs():
    yield load_graph(tiny_momentum_step(), dims={"batch": 2})
    yield load_graph(tiny_momentum_step(late_reader_of_w=True), dims={"batch": 2})
    for seed in range(8):
        yield load_graph(random_dag(seed, n_ops=30))
    for name in ("mlp_sgd", "cnn_bn_momentum"):
        yield load_graph(model_path(name))
        yield load_graph(model_path(name), optimization="extended")


def quick_orders(graph):
    """(name, order) of every quick order that applies to `graph`."""
    for name, make in QUICK_ORDERS.items():
        order = make(graph)
        if order is not None:
            yield name, order


def test_running_bytes_follow_the_memory_model_step_by_step():
    """The list schedulers' incremental bytes are the replay's, step for step, on these graphs
    (views, in-place elementwise ops and state updates included)."""
    for graph in small_graphs():
        for name, order in quick_orders(graph):
            check_order(graph, order)
            running = RunningBytes(graph)
            steps = []
            for op in order:
                effect = running.effect(op)
                steps.append(running.step_bytes(effect))
                running.run(op, effect)
            assert steps == list(lifetimes(graph, order).live_bytes), (graph.name, name)
            assert running.peak == max(steps)


def test_list_schedules_run_every_other_reader_of_a_state_before_its_update():
    graph = load_graph(tiny_momentum_step(late_reader_of_w=True), dims={"batch": 2})
    w, w_new = graph.tensor("W"), graph.tensor("W_new")
    for name in ("greedy", "eager_free"):
        order = QUICK_ORDERS[name](graph)
        assert lifetimes(graph, order).alias.get(w_new.id) == w.id, name


def test_just_in_time_runs_weight_only_ops_right_before_their_use():
    graph = load_graph(residual_blocks(4))
    order = just_in_time(graph, file_order(graph))
    check_order(graph, order)
    uses = [graph.tensors[op.output_ids[0]].consumers[0] for op in graph.ops
            if op.op_type == "Transpose"]
    for i, use in enumerate(uses):  # after the previous block's MatMul, before its own
        previous = order.index(uses[i - 1]) if i else -1
        assert previous < order.index(graph.ops[i].id) < order.index(use)
    assert lifetimes(graph, order).peak < lifetimes(graph, file_order(graph)).peak


def update_after_late_readers():
    """A momentum step whose update temporaries (m_new^2, then * lr) come first in the file,
    ahead of three ops that still read the old W: as exported, the temporaries would be held
    across those reads."""
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["y"]),
        helper.make_node("Transpose", ["x"], ["xT"]),
        helper.make_node("MatMul", ["xT", "y"], ["gW"]),
        helper.make_node("Mul", ["m", "mom"], ["mm"]),
        helper.make_node("Add", ["mm", "gW"], ["m_new"]),
        helper.make_node("Mul", ["m_new", "m_new"], ["squared"]),
        helper.make_node("Mul", ["squared", "lr"], ["delta"]),
        helper.make_node("Relu", ["W"], ["r1"]),
        helper.make_node("Relu", ["r1"], ["r2"]),
        helper.make_node("ReduceSum", ["r2"], ["W_probe"], keepdims=0),
        helper.make_node("Sub", ["W", "delta"], ["W_new"]),
    ]
    return make_model(
        nodes, [value("x", [4, 4]), value("W", [4, 4]), value("m", [4, 4])],
        [value("W_new", [4, 4]), value("m_new", [4, 4]), value("W_probe", [])],
        [numpy_helper.from_array(np.float32(0.9), "mom"),
         numpy_helper.from_array(np.float32(0.1), "lr")])


def test_just_in_time_moves_an_update_chain_to_the_update():
    """The temporaries of an update (each read only by the next, the first reading the new
    state, a graph output held to the end anyway) move together to right before the update:
    moved alone, the last would have held the one before it longer."""
    graph = load_graph(update_after_late_readers())
    order = just_in_time(graph, file_order(graph))
    check_order(graph, order)
    op = {graph.tensors[o.output_ids[0]].name: o.id for o in graph.ops}
    at = [order.index(op[name]) for name in ("squared", "delta", "W_new")]
    assert at == [at[0], at[0] + 1, at[0] + 2]
    assert order.index(op["W_probe"]) < at[0]
    held = sum(lifetimes(graph, order).live_bytes)  # over the steps: the peak is the MatMul's
    assert held < sum(lifetimes(graph, file_order(graph)).live_bytes)


@pytest.mark.parametrize("seed", range(6))
def test_just_in_time_never_raises_the_peak(seed):
    graph = load_graph(random_dag(seed, n_ops=40))
    for _, order in quick_orders(graph):
        moved = just_in_time(graph, order)
        check_order(graph, moved)
        assert lifetimes(graph, moved).peak <= lifetimes(graph, order).peak


def test_quick_orders_take_well_under_a_second_at_5000_ops():
    graph = load_graph(residual_blocks(1000))
    assert len(graph.ops) == 5000
    # As if ONNX Runtime had rewritten it keeping every op, so that every quick order applies.
    graph = replace(graph, source_positions=tuple(range(5000)))
    for name, make in QUICK_ORDERS.items():
        started = time.perf_counter()
        order = make(graph)
        assert order is not None, name
        check_order(graph, order)
        assert time.perf_counter() - started < 1.0, name


def test_enough_bytes_stops_ordering_after_the_quick_orders():
    graph = load_graph(model_path("mlp_sgd"))
    quick = optimize_order(graph, use_solver=False)
    assert quick.peak_bytes > quick.lower_bound_bytes  # exact ordering could still help here
    started = time.perf_counter()
    enough = optimize_order(graph, time_limit=30, enough_bytes=quick.peak_bytes)
    assert time.perf_counter() - started < 5
    assert enough.stopped == "enough" and not enough.solver
    assert (enough.order, enough.peak_bytes) == (quick.order, quick.peak_bytes)
    assert enough.status == "FEASIBLE" and enough.gap > 0  # honest: nothing more was proven
    searched = optimize_order(graph, time_limit=2, enough_bytes=quick.peak_bytes - 1)
    assert searched.stopped in {"searched", "enough"} and searched.solver
    assert searched.peak_bytes <= quick.peak_bytes


def test_a_share_too_short_to_build_the_whole_graph_model_skips_it():
    """Choosing and building OLLA's whole-graph model costs about 25 us per op before CP-SAT
    starts: a 2 s request on a 20,000-op chain paid 0.5 s for a model with no time to solve."""
    graph = load_graph(model_path("mlp_sgd"))  # 67 ops: 1.7 ms
    quick = optimize_order(graph, use_solver=False)
    assert quick.peak_bytes > quick.lower_bound_bytes  # exact ordering could still help here
    short = optimize_order(graph, time_limit=0.002, start=quick)
    assert not short.solver
    assert any("too little time" in note for note in short.notes)
    assert short.peak_bytes <= quick.peak_bytes


def test_ordering_goes_on_from_an_earlier_result():
    graph = load_graph(model_path("cnn_bn_momentum"))
    quick = optimize_order(graph, use_solver=False)
    more = optimize_order(graph, time_limit=2, start=quick)
    assert more.quick_seconds == quick.quick_seconds
    assert more.candidates.items() >= quick.candidates.items()
    assert more.peak_bytes == lifetimes(graph, more.order).peak <= quick.peak_bytes
    assert more.seconds >= quick.seconds


def test_windows_stop_at_the_target():
    graph = load_graph(random_dag(2, n_ops=30))
    start = file_order(graph)
    peak = lifetimes(graph, start).peak
    refined, windows = refine_order(graph, start, window=10, time_limit=5, target=peak)
    assert (refined, windows) == (start, 0)


def test_a_budget_that_fits_gets_its_plan_without_the_ordering_share():
    """The 67-op MLP took ~9 s with a 30 s limit (0.3 of it ordering): now the quick order's
    keep-everything plan fits and ordering stops there."""
    request = PlanRequest(budgets={"cpu": 2**40}, time_limit_s=30)
    started = time.perf_counter()
    plan = plan_model(model_path("mlp_sgd"), request)
    assert time.perf_counter() - started < 5
    order = next(s for s in plan.solvers if s.phase == "order")
    assert order.seconds < 2 and any("exact ordering skipped" in n for n in order.notes)


def late_shrinking_group(n: int = 256):
    """a = Relu(x) is saved (read at the end); three more values of a's size are live at the
    end of the file, where the exporter put Concat(a, a) (twice a's bytes) whose one reader
    reduces it to a scalar."""
    nodes = [helper.make_node("Relu", ["x"], ["a"]),
             helper.make_node("Exp", ["a"], ["e1"]),
             helper.make_node("Sigmoid", ["a"], ["e2"]),
             helper.make_node("Tanh", ["a"], ["e3"]),
             helper.make_node("Concat", ["a", "a"], ["big"], axis=0),
             helper.make_node("ReduceSum", ["big"], ["s"], keepdims=0),
             helper.make_node("Sum", ["e1", "e2", "e3", "a"], ["y"]),
             helper.make_node("Mul", ["y", "s"], ["out"])]
    return make_model(nodes, [value("x", [n])], [value("out", [n])])


def test_shrink_early_runs_a_large_temporary_where_few_bytes_are_live():
    graph = load_graph(late_shrinking_group())
    order = file_order(graph)
    moved = shrink_early(graph, order, lifetimes(graph, order).live_bytes)
    assert moved is not None
    check_order(graph, moved)
    assert moved.index(4) == 1 and moved.index(5) == 2  # Concat and ReduceSum right after Relu
    assert lifetimes(graph, moved).peak < lifetimes(graph, order).peak


@pytest.fixture
def pool_index_idiom_kept(monkeypatch, tmp_path):
    """ONNX Runtime's extended rewrite without ours that folds the max-pool index idiom (a 1x1
    MaxPool whose int64 indices give each plane's offset: schemas.pool_offsets), as a graph
    from another exporter or rewrite may still have it (in a cache of its own: the rewrites'
    cache knows their source, not a function replaced at run time)."""
    monkeypatch.setattr(optimized_graph, "fold_pool_offsets", lambda data: data)
    monkeypatch.setenv("ARENAPLAN_CACHE_DIR", str(tmp_path))


def test_the_max_pool_index_idiom_runs_before_the_saved_activations_pile_up(
        pool_index_idiom_kept, monkeypatch):
    """cnn_bn_momentum's extended graph with the idiom: ONNX Runtime's rewrite puts the
    max-pool backward's MaxPool with indices (the input's size twice, int64 indices) at the end
    of the forward pass. (Without our late recomputation of the BatchNorm outputs: with it,
    eager_free_source ties shrink_early at 415,177 B.)"""
    monkeypatch.setattr(optimized_graph, "recompute_for_late_readers", lambda data: data)
    graph = load_graph(model_path("cnn_bn_momentum"), optimization="extended")
    result = optimize_order(graph, use_solver=False)
    others = min(peak for name, peak in result.candidates.items() if name != "shrink_early")
    assert result.method == "shrink_early" and result.peak_bytes < 0.9 * others


def test_folding_the_max_pool_index_idiom_orders_lower_than_running_it_early(tmp_path):
    """What `arenaplan plan` plans by default: the idiom folded into constants, every quick
    order of cnn_bn_momentum's extended graph peaks lower than shrink_early did with it (measured:
    366,057 B with the idiom, 269,277 B folded)."""
    folded = optimize_order(load_graph(model_path("cnn_bn_momentum"), optimization="extended"),
                            use_solver=False)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(optimized_graph, "fold_pool_offsets", lambda data: data)
        patch.setenv("ARENAPLAN_CACHE_DIR", str(tmp_path))  # not the folded graph cached
        kept = optimize_order(load_graph(model_path("cnn_bn_momentum"),
                                         optimization="extended"), use_solver=False)
    assert folded.peak_bytes < 0.8 * kept.peak_bytes


def test_a_rewrite_knows_where_its_ops_were_in_the_model_as_sent():
    sent = load_graph(model_path("unet_small"))
    rewritten = load_graph(model_path("unet_small"), optimization="extended")
    assert sent.source_positions == () and source_ranks(sent) is None
    positions = rewritten.source_positions
    assert len(positions) == len(rewritten.ops)
    assert sum(p is not None for p in positions) > 0.9 * len(positions)
    for op, p in zip(rewritten.ops, positions, strict=True):
        assert p is None or sent.ops[p].name == op.name
    rank = source_ranks(rewritten)
    assert rank is not None
    order = sorted(range(len(rank)), key=rank.__getitem__)
    check_order(rewritten, order)
    kept = [positions[op] for op in order if positions[op] is not None]
    assert kept == sorted(kept)  # the model's order, wherever the rewrite allows it


def test_a_rewrite_orders_as_well_as_the_model_as_sent(pool_index_idiom_kept):
    """ONNX Runtime's own order of unet_small's rewrite cost the eager-free scheduler 6% (UNet
    with Adam: 151.9 MiB against 144.4 MiB as sent); breaking its ties by the exporter's order
    gets that back. (With the max-pool index idiom folded, as planned by default, the plain
    eager-free order no longer loses it.)"""
    sent = optimize_order(load_graph(model_path("unet_small")), use_solver=False)
    graph = load_graph(model_path("unet_small"), optimization="extended")
    rewritten = optimize_order(graph, use_solver=False)
    assert rewritten.candidates["eager_free_source"] < 0.97 * rewritten.candidates["eager_free"]
    assert rewritten.peak_bytes <= sent.peak_bytes
