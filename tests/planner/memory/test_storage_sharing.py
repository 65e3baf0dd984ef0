"""Views and in-place writes in the one memory model (planner.memory.replay), and the plan
validator's independent check of them."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from planner.ir.graph import load_graph
from planner.memory.liveness import lifetimes, order_lower_bound
from planner.memory.replay import replay
from planner.memory.schedule import Compute, free_after_last_read, home_on, sequential_schedule
from planner.plan.builder import build_plan
from planner.plan.validate import validate_plan
from schemas.plan import PlanRequest
from tests.support.onnx_builders import make_model, tiny_momentum_step, value

N = 1024  # floats per activation: 4 KiB


def _graph(nodes, outputs, extra_inputs=(), initializers=()):
    model = make_model(nodes, [value("x", [N]), *extra_inputs], outputs, initializers)
    return load_graph(model)


def _sharing(graph):
    walk = replay(graph, sequential_schedule(graph, range(len(graph.ops)), "cpu"))
    return {graph.tensors[m.tensor].name: (graph.tensors[m.owner.tensor].name, m.shares)
            for m in walk.materializations if m.storage is not None}


def _shape(name, dims):
    return numpy_helper.from_array(np.array(dims, dtype=np.int64), name)


def test_a_view_adds_no_bytes():
    relu = helper.make_node("Relu", ["x"], ["a"])
    with_view = _graph([relu, helper.make_node("Reshape", ["a", "s"], ["r"]),
                        helper.make_node("ReduceSum", ["r"], ["loss"], keepdims=0)],
                       [value("loss", [])], initializers=[_shape("s", [32, 32])])
    without = _graph([relu, helper.make_node("ReduceSum", ["a"], ["loss"], keepdims=0)],
                     [value("loss", [])])
    assert _sharing(with_view) == {"r": ("a", "view")}
    shape_bytes = 16  # the Reshape's shape constant, held for the whole step
    assert lifetimes(with_view, range(2 + 1)).peak == (
        lifetimes(without, range(2)).peak + shape_bytes)


def test_elementwise_chain_runs_in_one_storage():
    graph = _graph([helper.make_node("Exp", ["x"], ["a"]),
                    helper.make_node("Sigmoid", ["a"], ["b"]),
                    helper.make_node("Neg", ["b"], ["c"]),
                    helper.make_node("ReduceSum", ["c"], ["loss"], keepdims=0)],
                   [value("loss", [])])
    # x is a data input: it keeps its value, so Exp writes bytes of its own; the rest go over it
    assert _sharing(graph) == {"b": ("a", "in_place"), "c": ("a", "in_place")}
    # step 0 holds x and a; after it one storage of N floats (and the loss) is all there is
    assert lifetimes(graph, range(4)).live_bytes == (8 * N, 4 * N, 4 * N, 4 * N + 4)
    assert lifetimes(graph, range(4)).alias == {2: 1, 3: 1}
    assert order_lower_bound(graph) == 8 * N


def test_no_write_over_a_value_read_later_or_one_that_must_survive():
    graph = _graph([helper.make_node("Exp", ["x"], ["a"]),
                    helper.make_node("Neg", ["a"], ["b"]),        # a is read again below
                    helper.make_node("Add", ["b", "a"], ["c"]),   # both die here
                    helper.make_node("Relu", ["c"], ["y"]),       # y is a graph output
                    helper.make_node("Abs", ["y"], ["z"]),
                    helper.make_node("Mul", ["k", "z"], ["w"])],  # k is a constant
                   [value("y", [N]), value("w", [N])],
                   initializers=[numpy_helper.from_array(np.ones(N, np.float32), "k")])
    assert _sharing(graph) == {"c": ("b", "in_place"), "y": ("b", "in_place"),
                               "w": ("z", "in_place")}


def test_a_value_kept_for_a_recomputation_is_not_written_over():
    graph = _graph([helper.make_node("Exp", ["x"], ["a"]),
                    helper.make_node("Neg", ["a"], ["b"]),
                    helper.make_node("ReduceSum", ["b"], ["loss"], keepdims=0)],
                   [value("loss", [])])
    home = home_on(graph, "cpu")
    once = [Compute(0, "cpu"), Compute(1, "cpu"), Compute(2, "cpu")]
    again = [*once, Compute(1, "cpu", recompute=True), Compute(2, "cpu", recompute=True)]
    from planner.memory.schedule import Schedule

    def shares(events):
        walk = replay(graph, Schedule(tuple(free_after_last_read(graph, events, home)), home))
        return [(graph.tensors[m.tensor].name, m.ordinal) for m in walk.materializations
                if m.shares == "in_place"]

    assert shares(once) == [("b", 0)]
    assert shares(again) == [("b", 1)]  # the first b may not go over a: a is read again


def test_a_state_update_chain_runs_in_place_only_when_the_order_allows():
    graph = load_graph(tiny_momentum_step(batch=2, late_reader_of_w=True))
    file_order = _sharing(graph)
    assert file_order["m_new"] == ("m", "in_place")  # m.mul_(mom).add_(gW)
    # the old W is read after the update in file order: W_new may not go over W
    assert file_order["W_new"][0] != "W"
    moved = list(range(len(graph.ops)))
    probe = moved.pop()  # run the late reader of W first
    walk = replay(graph, sequential_schedule(graph, [probe, *moved], "cpu"))
    assert {graph.tensors[m.tensor].name: graph.tensors[m.owner.tensor].name
            for m in walk.materializations if m.storage is not None}["W_new"] == "W"


def _relu_reuse_plan():
    graph = _graph([helper.make_node("Exp", ["x"], ["a"]),
                    helper.make_node("Neg", ["a"], ["b"]),
                    helper.make_node("Add", ["b", "a"], ["c"]),
                    helper.make_node("ReduceSum", ["c"], ["loss"], keepdims=0)],
                   [value("loss", [])])
    request = PlanRequest(budgets={"cpu": 1 << 20}, alignment=64)
    built = build_plan(graph, sequential_schedule(graph, range(4), "cpu"), request,
                       plan_id="t", planner_version="t")
    return graph, built.plan


def test_the_validator_accepts_the_plan_and_rejects_a_write_over_a_live_value():
    graph, plan = _relu_reuse_plan()
    assert validate_plan(graph, plan).ok
    buffers = [b.model_copy() for b in plan.buffers]
    by_tensor = {b.tensor: b for b in buffers}
    a, b = by_tensor["a"], by_tensor["b"]
    assert b.owns_storage
    for moved in [o for o in buffers if o.storage == b.id]:  # Neg over a: a is read later
        moved.storage, moved.shares, moved.offset = a.id, "in_place", a.offset
    errors = validate_plan(graph, plan.model_copy(update={"buffers": buffers})).errors
    assert any("while a@cpu is still read" in e for e in errors), errors


def test_the_validator_rejects_a_view_written_by_an_op_that_writes_bytes():
    graph, plan = _relu_reuse_plan()
    buffers = [b.model_copy() for b in plan.buffers]
    by_tensor = {b.tensor: b for b in buffers}
    c, b = by_tensor["c"], by_tensor["b"]
    c.shares = "view"
    errors = validate_plan(graph, plan.model_copy(update={"buffers": buffers})).errors
    assert any("cannot be a view" in e for e in errors), errors
    c.shares, c.storage, c.offset = "in_place", "nowhere", b.offset
    errors = validate_plan(graph, plan.model_copy(update={"buffers": buffers})).errors
    assert any("which no buffer owns" in e for e in errors), errors


def test_the_arena_of_a_float_graph_with_an_int_view_stays_typed():
    """A view changes the shape, never the dtype or the byte count."""
    graph = _graph([helper.make_node("Cast", ["x"], ["i"], to=TensorProto.INT32),
                    helper.make_node("Flatten", ["i"], ["f"]),
                    helper.make_node("ReduceSum", ["f"], ["loss"], keepdims=0)],
                   [value("loss", [], TensorProto.INT32)])
    assert _sharing(graph) == {"f": ("i", "view")}


def _scatter_graph(updates: str = "u"):
    """a = Exp(x); u = Neg(x); s = ScatterElements(a, idx, updates); loss = sum(s)."""
    return _graph([helper.make_node("Exp", ["x"], ["a"]),
                   helper.make_node("Neg", ["x"], ["u"]),
                   helper.make_node("ScatterElements", ["a", "idx", updates], ["s"], axis=0),
                   helper.make_node("ReduceSum", ["s"], ["loss"], keepdims=0)],
                  [value("loss", [])], extra_inputs=[value("idx", [N], TensorProto.INT64)])


def test_a_scatter_writes_over_its_data_input_only():
    """The loss gradient's one-hot scatter goes over its zeros (logits-sized: 119 MiB on
    BERT-small), never over its updates, which it reads while writing."""
    assert _sharing(_scatter_graph()) == {"s": ("a", "in_place")}
    assert _sharing(_scatter_graph(updates="a")) == {}


def test_softmax_writes_over_its_input():
    graph = _graph([helper.make_node("Exp", ["x"], ["a"]),
                    helper.make_node("LogSoftmax", ["a"], ["b"], axis=0),
                    helper.make_node("Softmax", ["b"], ["c"], axis=0),
                    helper.make_node("ReduceSum", ["c"], ["loss"], keepdims=0)],
                   [value("loss", [])])
    assert _sharing(graph) == {"b": ("a", "in_place"), "c": ("a", "in_place")}


def test_the_validator_rejects_a_scatter_written_over_its_updates():
    graph = _scatter_graph()
    request = PlanRequest(budgets={"cpu": 1 << 20}, alignment=64)
    plan = build_plan(graph, sequential_schedule(graph, range(4), "cpu"), request,
                      plan_id="t", planner_version="t").plan
    assert validate_plan(graph, plan).ok
    buffers = [b.model_copy() for b in plan.buffers]
    by_tensor = {b.tensor: b for b in buffers}
    s, u = by_tensor["s"], by_tensor["u"]
    s.storage, s.offset = u.id, u.offset  # u also dies at the scatter: only the slot is wrong
    errors = validate_plan(graph, plan.model_copy(update={"buffers": buffers})).errors
    assert any("cannot write" in e and "in place" in e for e in errors), errors
