"""Kernels write into the arena at the planned offsets, and training steps allocate nothing.

- Poison: every arena is filled with 0xFF (NaN for floats) before the step; after each unit runs,
  every buffer it wrote must hold the tensor's true value (from ONNX Runtime running the whole
  graph with every intermediate exposed) at its planned offset, and bytes no buffer covers must
  still be 0xFF (nothing writes outside its slice).
- Bindings: onnxruntime's output values after a step sit at the planned arena addresses.
- Flat memory: after two warm-up steps, further steps do not raise the peak RSS of a fresh
  `arenaplan run --strict-memory` process, and allocate no Python/numpy memory.
"""

from __future__ import annotations

import json
import tracemalloc
from functools import cache

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from runtime.executor import ExecutorOptions, PlanExecutor
from runtime.inputs import read_npz
from runtime.measure import PeakGrowth
from runtime.model import read_model
from runtime.segments import CopyUnit, Segment
from schemas.plan import ComputeStep, CopyStep
from tests.support.fixture_zoo import FIXTURE_DIR, model_path
from tests.support.runtime_plans import full_budget_plan, recompute_plan, two_device_plan
from tests.support.service import cli

POISON = 0xFF


@cache
def every_value(name: str) -> dict[str, np.ndarray]:
    """Every tensor of one training step (step 1) as ONNX Runtime computes it."""
    proto = onnx.shape_inference.infer_shapes(onnx.load(model_path(name)))
    known = {o.name for o in proto.graph.output}
    for info in proto.graph.value_info:
        if info.name not in known:
            proto.graph.output.append(info)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(proto.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    values = dict(np.load(FIXTURE_DIR / f"{name}.inputs.npz"))
    names = [o.name for o in session.get_outputs()]
    result = dict(zip(names, session.run(names, values), strict=True))
    result.update(values)
    result.update({i.name: onnx.numpy_helper.to_array(i) for i in proto.graph.initializer})
    return result


def poisoned_executor(name: str, plan, fuse: bool) -> PlanExecutor:
    model = read_model(model_path(name))
    executor = PlanExecutor(model, plan, options=ExecutorOptions(fuse=fuse))
    for arena in executor.arenas.values():
        arena.fill(POISON)
    for constant, b_id in plan.constants.items():
        executor.write_buffer(b_id, model.initializers[constant])
    executor.load_inputs(read_npz(FIXTURE_DIR / f"{name}.inputs.npz", model))
    return executor


def written_by(executor: PlanExecutor, unit) -> list[str]:
    steps = executor.plan.steps
    if isinstance(unit, CopyUnit):
        step = steps[unit.step]
        assert isinstance(step, CopyStep)
        return [step.dst]
    return [b for i in unit.steps for b in steps[i].outputs if b is not None]


def uncovered_bytes(executor: PlanExecutor, device: str) -> np.ndarray:
    arena = executor.arenas[device]
    covered = np.zeros(arena.size, dtype=bool)
    for b in executor.plan.buffers:
        if b.device == device:
            covered[b.offset:b.offset + b.size] = True
    return arena.bytes[~covered]


def holds_its_value(plan, b_id: str, step: int) -> bool:
    """Whether no value was written in place over buffer `b_id`'s storage between its own
    write and the end of `step` (a view writes nothing)."""
    storage = next(b.storage for b in plan.buffers if b.id == b_id)
    in_place = {b.id for b in plan.buffers if b.storage == storage and b.shares == "in_place"}
    writes = [i for i, s in enumerate(plan.steps[:step + 1])
              if isinstance(s, ComputeStep) and set(s.outputs) & (in_place | {b_id})]
    return bool(writes) and b_id in plan.steps[writes[-1]].outputs


@pytest.mark.parametrize("name,make", [
    ("mlp_sgd", full_budget_plan),
    ("cnn_bn_momentum", full_budget_plan),
    ("gpt2_tiny_adam", full_budget_plan),
    ("cnn_bn_momentum", recompute_plan),
    ("mlp_sgd", two_device_plan),
], ids=["mlp", "cnn", "gpt2", "cnn-recompute", "mlp-two-device"])
def test_every_written_buffer_holds_its_value_at_its_offset(name, make):
    plan = make(name)
    expected = every_value(name)
    executor = poisoned_executor(name, plan, fuse=False)
    checked = []

    def inspect(unit) -> None:
        for b_id in written_by(executor, unit):
            b = executor.buffers[b_id]
            view = executor.host_view(b_id)  # the arena's bytes at the planned offset
            np.testing.assert_allclose(view, expected[b.tensor], rtol=1e-6, atol=1e-6,
                                       err_msg=f"buffer {b_id}")
            checked.append(b_id)

    executor.step(after_unit=inspect)
    written = {b for s in plan.steps if isinstance(s, ComputeStep) for b in s.outputs if b}
    written |= {s.dst for s in plan.steps if isinstance(s, CopyStep)}
    assert set(checked) == written
    for device in executor.arenas:
        assert (uncovered_bytes(executor, device) == POISON).all(), device


def test_fused_segments_write_in_place_too():
    """With whole segments per session, every buffer still live when its segment ends holds
    its value; in particular every graph output."""
    name = "cnn_bn_momentum"
    plan = full_budget_plan(name)
    expected = every_value(name)
    executor = poisoned_executor(name, plan, fuse=True)
    checked = []

    def inspect(unit) -> None:
        if not isinstance(unit, Segment):
            return
        end = unit.steps[-1]
        for b_id in written_by(executor, unit):
            if executor.buffers[b_id].last_step >= end and holds_its_value(plan, b_id, end):
                np.testing.assert_allclose(executor.host_view(b_id),
                                           expected[executor.buffers[b_id].tensor],
                                           rtol=1e-6, atol=1e-6, err_msg=b_id)
                checked.append(b_id)

    executor.step(after_unit=inspect)
    assert set(plan.graph_outputs.values()) <= set(checked)
    assert (uncovered_bytes(executor, "cpu") == POISON).all()


@pytest.mark.parametrize("fuse", [True, False])
def test_onnxruntime_outputs_are_the_arena_slices(fuse):
    name = "gpt2_tiny_adam"
    executor = poisoned_executor(name, full_budget_plan(name), fuse=fuse)
    executor.step()
    pointers = executor.output_pointers()
    assert len(pointers) == sum(1 for s in executor.plan.steps if isinstance(s, ComputeStep)
                                for b in s.outputs if b is not None)
    assert all(planned == actual for _, planned, actual in pointers)


def test_steps_do_not_grow_peak_memory(tmp_path):
    """Measured as `arenaplan run --strict-memory` measures it: in a fresh process with glibc's
    malloc thresholds pinned. In the test process the peak depends on what earlier tests left
    (other threads, a raised mmap threshold keeping freed scratch resident: once +5 MB at the
    sixth step in CI), which says nothing about the steps."""
    name = "resnet_cifar"  # the fixture with the largest arena (~6.6 MB)
    plan = full_budget_plan(name)
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(plan.model_dump_json())
    done = cli("run", str(model_path(name)), "--plan", str(plan_file), "--inputs",
               str(FIXTURE_DIR / f"{name}.inputs.npz"), "--steps", "10", "--strict-memory",
               "--json", timeout=300)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    if not report["memory"]["measured"]:
        pytest.skip("this OS does not let a process reset its peak RSS")
    arena = sum(report["arena_bytes"].values())
    growth = [row["peak_rss_growth_bytes"] for row in report["steps"]]
    warmed_up = max(growth[:2])
    assert max(growth[2:]) - warmed_up < min(2 << 20, arena // 3), growth
    # the probe sees an allocation of the arena's size (a test that can fail)
    control = PeakGrowth.start()
    block = np.ones(arena, dtype=np.uint8)
    control.sample()
    del block
    assert control.growth >= arena * 0.9


def test_steps_allocate_no_python_or_numpy_memory():
    name = "gpt2_tiny_adam"
    executor = poisoned_executor(name, full_budget_plan(name), fuse=True)
    executor.step()
    output_bytes = sum(executor.buffers[b].size for b in executor.plan.graph_outputs.values())
    tracemalloc.start()
    try:
        for _ in range(5):
            executor.step()
        _, during_steps = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        executor.outputs()  # control: reading outputs out of the arena does allocate copies
        _, reading = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert during_steps < 64 * 1024
    assert reading >= output_bytes
