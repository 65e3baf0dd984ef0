"""The runtime's parts one by one: arenas, node order, segment grouping, copies, helpers, CUDA."""

from __future__ import annotations

import sys

import numpy as np
import onnx
import pytest

from planner.ir.graph import load_graph
from planner.pipeline import plan_model
from runtime.arena import ALIGNMENT, HostArena, allocate_arena
from runtime.devices import cuda_device_error, parse_device
from runtime.errors import DeviceUnavailableError, InputValuesError
from runtime.executor import PlanExecutor
from runtime.inputs import generated_inputs, loss_output, read_npz
from runtime.model import read_model
from runtime.reference import ReferenceSession, compare_outputs, max_abs_diff
from runtime.segments import CopyUnit, Segment, group_steps
from runtime.transfer import Transfers, host_place
from schemas.plan import BufferSpec, ComputeStep, CopyStep, FreeStep, PlanRequest
from tests.support.fixture_zoo import FIXTURE_DIR, model_path
from tests.support.runtime_plans import GENEROUS, full_budget_plan

no_gpu = cuda_device_error(0) is not None


def test_host_arena_is_one_aligned_allocation_with_typed_views():
    arena = allocate_arena(parse_device("cpu:1"), 1000)
    assert isinstance(arena, HostArena)
    assert arena.base_ptr % ALIGNMENT == 0 and arena.bytes.size == 1000
    view = arena.array(64, "float32", (2, 3))
    assert view.ctypes.data == arena.pointer(64)
    view[...] = 1.5
    assert np.frombuffer(arena.bytes[64:88].tobytes(), dtype=np.float32).tolist() == [1.5] * 6
    assert not view.flags.owndata
    with pytest.raises(IndexError):
        arena.array(996, "float32", (2,))


def test_device_names():
    assert parse_device("cpu").ort_device == ("cpu", 0)
    assert parse_device("cpu:3").ort_device == ("cpu", 0)
    assert parse_device("cuda:1").ort_device == ("cuda", 1)
    for bad in ("gpu", "cuda", "tpu:0"):
        with pytest.raises(DeviceUnavailableError):
            parse_device(bad)


def test_node_order_is_the_planners_for_an_unsorted_file(tmp_path):
    """A model whose file order is not topological: the runtime numbers ops as the planner
    does, so a plan for it runs and matches."""
    proto = onnx.load(model_path("mlp_sgd"))
    nodes = list(proto.graph.node)
    del proto.graph.node[:]
    proto.graph.node.extend(nodes[::-1])
    data = proto.SerializeToString()
    graph = load_graph(data)
    model = read_model(data)
    assert [list(n.output) for n in model.nodes] == [
        [graph.tensors[t].name if t is not None else "" for t in op.outputs] for op in graph.ops
    ]
    assert [n.output for n in model.nodes] != [n.output for n in nodes[::-1]]
    plan = plan_model(data, PlanRequest(budgets={"cpu": GENEROUS}, time_limit_s=1))
    reference = ReferenceSession(read_model(model_path("mlp_sgd")), plan.state_updates)
    _run_beside(PlanExecutor(model, plan), reference, read_npz(FIXTURE_DIR / "mlp_sgd.inputs.npz",
                                                               model), steps=2, tolerance=1e-6)


def _run_beside(executor: PlanExecutor, reference: ReferenceSession,
                values: dict[str, np.ndarray], steps: int, tolerance: float) -> None:
    """Run both `steps` times on the same inputs; every output stays within `tolerance`."""
    executor.load_inputs(values)
    reference.load_inputs(values)
    for _ in range(steps):
        executor.step()
        reference.step()
        assert max(compare_outputs(executor.outputs(), reference.last).values()) <= tolerance


def _buffer(b_id: str, offset: int, first: int, last: int, storage: str | None = None,
            shares: str | None = None) -> BufferSpec:
    return BufferSpec(id=b_id, tensor=b_id, device="cpu", offset=offset, size=64,
                      dtype="float32", shape=[16], first_step=first, last_step=last,
                      role="activation", zone="transient", storage=storage or b_id,
                      shares=shares)


def _compute(op: int, op_type: str, inputs: list[str], outputs: list[str]) -> ComputeStep:
    return ComputeStep(op_id=op, op_name=f"n{op}", op_type=op_type, device="cpu",
                       inputs=inputs, outputs=outputs)


def test_segments_split_where_address_reuse_depends_on_node_order():
    # a = relu(x); b = neg(x); c = exp(a); free a; d = abs(b) written over a's bytes.
    # d's writer does not depend on a's reader, so an order-free session could run it first.
    buffers = {b.id: b for b in [
        _buffer("x", 0, 0, 1), _buffer("a", 64, 0, 2), _buffer("b", 128, 1, 4),
        _buffer("c", 192, 2, 5), _buffer("d", 64, 4, 5),
    ]}
    steps = [
        _compute(0, "Relu", ["x"], ["a"]), _compute(1, "Neg", ["x"], ["b"]),
        _compute(2, "Exp", ["a"], ["c"]), FreeStep(buffer="a"), _compute(3, "Abs", ["b"], ["d"]),
    ]
    free_order = group_steps(steps, buffers)
    assert [u.steps for u in free_order] == [[0, 1, 2], [4]]
    kept_order = group_steps(steps, buffers, order_kept={"cpu"})
    assert [u.steps for u in kept_order] == [[0, 1, 2, 4]]
    # when d's writer depends on every use of a, any order is safe: one segment
    steps[4] = _compute(3, "Abs", ["c"], ["d"])
    assert [u.steps for u in group_steps(steps, buffers)] == [[0, 1, 2, 4]]
    # a Shape node may run early even when order is kept: it is checked like the general case
    steps[4] = _compute(3, "Shape", ["b"], ["d"])
    assert len(group_steps(steps, buffers, order_kept={"cpu"})) == 2
    # copies end segments, devices split them, fuse=False gives one op per session
    assert [type(u) for u in group_steps([steps[0], CopyStep(src="a", dst="c"), steps[1]],
                                         buffers)] == [Segment, CopyUnit, Segment]
    assert [u.steps for u in group_steps(steps, buffers, fuse=False)] == [[0], [1], [2], [4]]


def test_segments_with_views_and_in_place_values():
    # a = relu(x); v = view of a; b = neg(v); c = exp(a) over a's bytes (in place): a's other
    # reader (the view, and b through it) must finish first. In an order-free session only b,
    # which c does not depend on, could run after c: the segment splits before c.
    buffers = {b.id: b for b in [
        _buffer("x", 0, 0, 0), _buffer("a", 64, 0, 3), _buffer("v", 64, 1, 2, "a", "view"),
        _buffer("b", 128, 2, 4), _buffer("c", 64, 3, 4, "a", "in_place"),
    ]}
    steps = [
        _compute(0, "Relu", ["x"], ["a"]), _compute(1, "Reshape", ["a"], ["v"]),
        _compute(2, "Neg", ["v"], ["b"]), _compute(3, "Exp", ["a"], ["c"]),
    ]
    assert [u.steps for u in group_steps(steps, buffers)] == [[0, 1, 2], [3]]
    assert [u.steps for u in group_steps(steps, buffers, order_kept={"cpu"})] == [[0, 1, 2, 3]]
    # when c depends on every reader of a's bytes, any order is safe; a view is no write, so
    # it never splits a segment although its bytes are a's, which other steps still read
    steps[3] = _compute(3, "Add", ["a", "b"], ["c"])
    assert [u.steps for u in group_steps(steps, buffers)] == [[0, 1, 2, 3]]
    steps[2] = _compute(2, "Neg", ["a"], ["b"])  # b no longer reads through the view
    assert [u.steps for u in group_steps(steps, buffers)] == [[0, 1, 2, 3]]


def test_host_copies_move_bytes_without_temporaries():
    device = parse_device("cpu")
    src = np.arange(10, dtype=np.float32)
    dst = np.zeros(10, dtype=np.float32)
    copy = Transfers().copier(host_place(src, device), host_place(dst, device))
    copy()
    assert dst.tolist() == src.tolist()
    src[:] = 7
    copy()  # the same closure copies the current bytes again
    assert dst.tolist() == [7.0] * 10


def test_inputs_and_loss_helpers():
    plan = full_budget_plan("mlp_sgd")
    values = generated_inputs(plan, seed=1)
    assert set(values) == set(plan.graph_inputs)
    assert values["label"].dtype == np.int64 and not values["label"].any()
    assert loss_output(plan) == "loss"
    with pytest.raises(InputValuesError):
        loss_output(plan, "no_such_output")


def test_max_abs_diff_treats_nan_and_inf_strictly():
    assert max_abs_diff(np.array([1.0, np.nan]), np.array([1.0, np.nan])) == 0.0
    assert max_abs_diff(np.array([1.0, np.nan]), np.array([1.0, 2.0])) == float("inf")
    assert max_abs_diff(np.array([np.inf]), np.array([np.inf])) == 0.0
    assert max_abs_diff(np.array([3], dtype=np.int64), np.array([1], dtype=np.int64)) == 2.0
    assert max_abs_diff(np.zeros(2), np.zeros(3)) == float("inf")


@pytest.mark.cuda
@pytest.mark.skipif(no_gpu, reason=f"no usable CUDA device: {cuda_device_error(0)}")
@pytest.mark.parametrize("name", ["mlp_sgd", "cnn_bn_momentum"])
def test_cuda_plans_run_in_a_device_arena_and_match(name):
    plan = plan_model(model_path(name), PlanRequest(budgets={"cuda:0": GENEROUS}, time_limit_s=1))
    model = read_model(model_path(name))
    executor = PlanExecutor(model, plan)
    assert executor.arenas["cuda:0"].device.is_cuda
    reference = ReferenceSession(model, plan.state_updates)
    values = read_npz(FIXTURE_DIR / f"{name}.inputs.npz", model)
    # GPU kernels round differently from the CPU reference
    _run_beside(executor, reference, values, steps=3, tolerance=1e-4)
    assert all(planned == actual for _, planned, actual in executor.output_pointers())


def test_the_runtime_never_imports_the_planner():
    """DESIGN.md: runtime -> schemas (+ onnx, onnxruntime, numpy), never planner/service."""
    import ast
    from pathlib import Path

    import runtime

    allowed = {"runtime", "schemas", "numpy", "onnx", "onnxruntime", "google", "pydantic"}
    for path in Path(runtime.__file__).parent.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                roots = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                roots = [node.module.split(".")[0]]
            else:
                continue
            for root in roots:
                assert root in allowed or root in sys.stdlib_module_names, (path.name, root)
