"""Kernel workspace in the plan, and the process peak it bounds (issue 16 item 2).

- planner.profile.workspace: a device's workspace is its largest step's measured scratch (ONNX
  Runtime's profiler, a real profile) plus the outputs the plan does not keep.
- Host scratch comes from one onnxruntime arena of the plan's workspace (runtime.host_workspace):
  a plan runs bit-identically with it, and its pages stay resident from step to step (no page
  faults, where malloc'd scratch is faulted in on every step).
- `arenaplan run --strict-memory`: in a fresh process, the peak during the steps stays within
  the plan's host arena + workspace + the fixed overhead; a step that allocates beyond it fails
  the run (exit 1, a message, no traceback); with --check it is refused.
- CUDA: the workspace zone (a first-fit allocator over the arena's last bytes) is the CUDA
  provider's external allocator, called through C function pointers; on a GPU a plan with its
  measured workspace runs with every kernel's scratch taken from the zone (skipped without one).
"""

from __future__ import annotations

import ctypes
import json
import subprocess
import sys
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from arenaplan.cli import main
from planner.ir.graph import load_graph
from planner.profile import QUICK_POLICY, profile_graph
from planner.profile.workspace import plan_workspace, step_workspace, with_workspace
from runtime.arena import ZONE_ALIGNMENT, Arena, WorkspaceZone
from runtime.devices import cuda_device_error, parse_device
from runtime.executor import ExecutorOptions, PlanExecutor
from runtime.inputs import read_npz
from runtime.kernels import providers
from runtime.measure import HOST_OVERHEAD_BYTES
from runtime.model import read_model
from schemas.plan import ComputeStep, Plan
from tests.support.fixture_zoo import inputs_path, model_path
from tests.support.reference import reference_diffs
from tests.support.runtime_plans import full_budget_plan
from tests.support.service import cli

NAME = "cnn_bn_momentum"
REPO = Path(__file__).resolve().parents[2]


@cache
def measured(name: str):
    graph = load_graph(model_path(name))
    values = dict(np.load(inputs_path(name)))
    return graph, profile_graph(graph, inputs=values, cache=None, policy=QUICK_POLICY)


def planned_with_workspace(name: str) -> Plan:
    graph, profile = measured(name)
    return with_workspace(graph, full_budget_plan(name), profile)


def at_budget(plan: Plan, budget: int) -> Plan:
    """`plan` with its one host device's budget set to `budget` bytes."""
    (device,) = plan.devices
    request = plan.request.model_copy(update={"budgets": {device.device: budget}})
    return plan.model_copy(update={
        "request": request, "devices": [device.model_copy(update={"budget_bytes": budget})]})


def test_a_devices_workspace_is_its_largest_measured_step():
    graph, profile = measured(NAME)
    plan = planned_with_workspace(NAME)
    by_op = {o.op_id: o for o in profile.ops}
    steps = [s for s in plan.steps if isinstance(s, ComputeStep)]
    largest = max(step_workspace(graph, s, by_op[s.op_id]) for s in steps)
    assert plan.devices[0].workspace_bytes == largest == plan_workspace(graph, plan, profile)["cpu"]
    # convolutions take scratch of their own (im2col), and the profile measured it
    convs = [by_op[s.op_id].costs["cpu"].workspace_bytes for s in steps
             if s.op_type.startswith("Conv")]
    assert largest >= max(convs) > 0


def test_outputs_the_plan_does_not_keep_count_as_scratch():
    graph, _ = measured(NAME)
    plan = full_budget_plan(NAME)
    step = next(s for s in plan.steps if isinstance(s, ComputeStep) and len(s.outputs) > 1)
    dropped = step.model_copy(update={"outputs": [step.outputs[0], *[None] * (len(step.outputs)
                                                                                 - 1)]})
    op = graph.ops[step.op_id]
    unkept = sum(graph.tensors[t].nbytes for t in op.outputs[1:] if t is not None)
    assert unkept > 0
    assert step_workspace(graph, dropped, None) == unkept
    assert step_workspace(graph, step, None) == 0


def with_host_workspace(plan: Plan, nbytes: int) -> Plan:
    (device,) = plan.devices
    return plan.model_copy(update={"devices": [device.model_copy(
        update={"workspace_bytes": nbytes})]})


def test_host_kernels_run_bit_identically_within_the_measured_workspace():
    plan = planned_with_workspace(NAME)
    assert plan.devices[0].workspace_bytes > 0
    assert all(diff == 0.0 for _, diff in reference_diffs(NAME, plan, ExecutorOptions(), 3))


FAULTS_PER_STEP = """
import json, resource, sys
from runtime.executor import PlanExecutor
from runtime.inputs import read_npz
from runtime.measure import pin_malloc_thresholds
from runtime.model import read_model
from runtime.plan_io import read_plan

pin_malloc_thresholds()  # a malloc'd block of 128 KiB or more is mapped, faulted and unmapped
model_file, inputs_file, *plans = sys.argv[1:]
model = read_model(model_file)
found = []
for plan in plans:
    executor = PlanExecutor(model, read_plan(plan))
    executor.load_inputs(read_npz(inputs_file, model))
    executor.step()
    executor.step()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(3):
        executor.step()
    found.append((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 3)
print(json.dumps(found))
"""


def test_host_scratch_stays_in_the_workspace_arena_from_step_to_step(tmp_path):
    """With the workspace, scratch pages stay resident: no page faults once steps are warm;
    malloc'd (no workspace) the convolutions' scratch is faulted in again on every step."""
    name = "resnet_cifar"
    plan = planned_with_workspace(name)
    assert plan.devices[0].workspace_bytes >= 1 << 20
    files = []
    for label, workspace in (("arena", plan.devices[0].workspace_bytes), ("malloc", 0)):
        files.append(tmp_path / f"{label}.json")
        files[-1].write_text(with_host_workspace(plan, workspace).model_dump_json())
    done = subprocess.run([sys.executable, "-c", FAULTS_PER_STEP, str(model_path(name)),
                           str(inputs_path(name)), *map(str, files)],
                          cwd=REPO, capture_output=True, text=True, check=False, timeout=300)
    assert done.returncode == 0, done.stderr
    arena, malloc = json.loads(done.stdout)
    scratch_pages = plan.devices[0].workspace_bytes // 4096
    assert malloc >= scratch_pages / 4  # measured: 1,064 faults per step
    assert arena <= malloc / 20  # measured: 0


def run_fresh(*argv: str) -> subprocess.CompletedProcess:
    return cli("run", *argv, timeout=300)


@pytest.mark.parametrize("name", ["cnn_bn_momentum", "resnet18_narrow"])
def test_the_peak_during_steps_stays_within_arena_workspace_and_overhead(name, tmp_path):
    assert_steps_within_arena_workspace_and_overhead(planned_with_workspace(name), name,
                                                     tmp_path)


def assert_steps_within_arena_workspace_and_overhead(plan: Plan, name: str, tmp_path: Path
                                                     ) -> None:
    """`plan` at a budget of its arena plus workspace runs 4 steps of fixture `name` with
    --strict-memory in a fresh process, its peak within that plus the fixed overhead."""
    reserved = plan.devices[0].arena_bytes + plan.devices[0].workspace_bytes
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(at_budget(plan, reserved).model_dump_json())
    done = run_fresh(str(model_path(name)), "--plan", str(plan_file), "--inputs",
                     str(inputs_path(name)), "--steps", "4", "--strict-memory", "--json")
    assert done.returncode == 0, done.stderr
    memory = json.loads(done.stdout)["memory"]
    if not memory["measured"]:
        pytest.skip("this OS does not let a process reset its peak RSS")
    assert memory["reserved_bytes"] == memory["budget_bytes"] == reserved
    assert memory["within_budget"]
    assert 0 < memory["peak_growth_bytes"] <= reserved + HOST_OVERHEAD_BYTES


def test_strict_memory_fails_a_run_whose_steps_exceed_the_budget(tmp_path, capsys, monkeypatch):
    plan = full_budget_plan("mlp_sgd")
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(at_budget(plan, plan.devices[0].arena_bytes).model_dump_json())
    step = PlanExecutor.step
    extra = HOST_OVERHEAD_BYTES + (32 << 20)
    held = []

    def step_and_allocate(self, *args, **kwargs):
        # scratch nothing in the plan accounts for: fresh pages, touched (counted as resident)
        held.append(np.ones(extra, dtype=np.uint8))
        return step(self, *args, **kwargs)

    monkeypatch.setattr(PlanExecutor, "step", step_and_allocate)
    code = main(["run", str(model_path("mlp_sgd")), "--plan", str(plan_file), "--steps", "2",
                 "--inputs", str(inputs_path("mlp_sgd")), "--strict-memory"])
    err = capsys.readouterr().err
    assert code == 1
    assert "memory over budget" in err and "Traceback" not in err


def test_strict_memory_is_refused_with_check(tmp_path, capsys):
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(full_budget_plan("mlp_sgd").model_dump_json())
    code = main(["run", str(model_path("mlp_sgd")), "--plan", str(plan_file), "--check",
                 "--strict-memory"])
    err = capsys.readouterr().err
    assert code == 2 and "--strict-memory" in err and "Traceback" not in err


def zone_over(buffer: np.ndarray) -> WorkspaceZone:
    start = -buffer.ctypes.data % ZONE_ALIGNMENT
    return WorkspaceZone(buffer.ctypes.data + start, buffer.size - ZONE_ALIGNMENT)


def test_the_workspace_zone_allocates_within_itself_and_refuses_beyond():
    memory = np.zeros(8 * ZONE_ALIGNMENT, dtype=np.uint8)
    zone = zone_over(memory)  # 7 blocks
    a, b, c = zone.alloc(1), zone.alloc(ZONE_ALIGNMENT + 1), zone.alloc(3 * ZONE_ALIGNMENT)
    assert all(p % ZONE_ALIGNMENT == 0 and zone.start <= p < zone.start + zone.size
               for p in (a, b, c))
    assert (b - a, c - b) == (ZONE_ALIGNMENT, 2 * ZONE_ALIGNMENT)
    assert zone.alloc(2 * ZONE_ALIGNMENT) == 0  # one block left: refused, not allocated
    ctypes.memset(c, 7, 3 * ZONE_ALIGNMENT)  # the addresses are the zone's own bytes
    assert (memory == 7).sum() == 3 * ZONE_ALIGNMENT
    zone.free(b)
    assert zone.alloc(2 * ZONE_ALIGNMENT) == b  # first fit reuses the hole
    for p in (a, b, c):
        zone.free(p)
    assert zone.in_use == 0 and zone.peak == 6 * ZONE_ALIGNMENT
    assert zone.alloc(zone.size) == zone.start  # freed blocks merged back into one


def test_the_cuda_provider_gets_the_zone_as_its_allocator():
    memory = np.zeros(4 * ZONE_ALIGNMENT, dtype=np.uint8)
    arena = Arena()
    arena.device, arena.zone = parse_device("cuda:1"), zone_over(memory)
    (name, options), = providers(arena)
    assert name == "CUDAExecutionProvider" and options["device_id"] == "1"
    # onnxruntime calls these addresses as C functions: call them the same way
    alloc = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t)(int(options["gpu_external_alloc"]))
    free = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(int(options["gpu_external_free"]))
    ctypes.CFUNCTYPE(None)(int(options["gpu_external_empty_cache"]))()
    p = alloc(100)
    assert p == arena.zone.start and arena.zone.in_use == ZONE_ALIGNMENT
    assert not alloc(10 * ZONE_ALIGNMENT)  # NULL: onnxruntime fails the run
    free(p)
    assert arena.zone.in_use == 0
    no_zone = Arena()
    no_zone.device = parse_device("cuda:1")
    assert providers(no_zone) == no_zone.device.providers()  # unmeasured: its own arena
    host = Arena()
    host.device = parse_device("cpu")
    assert providers(host) == ["CPUExecutionProvider"]


@pytest.mark.cuda
@pytest.mark.skipif(cuda_device_error(0) is not None,
                    reason=f"no usable CUDA device: {cuda_device_error(0)}")
def test_a_cuda_plan_runs_within_its_measured_workspace():
    from planner.pipeline import plan_model
    from schemas.plan import PlanRequest

    graph = load_graph(model_path(NAME))
    values = dict(np.load(inputs_path(NAME)))
    profile = profile_graph(graph, ["cuda:0"], inputs=values, cache=None, policy=QUICK_POLICY)
    plan = plan_model(model_path(NAME), PlanRequest(budgets={"cuda:0": 2**40}, time_limit_s=1,
                                                    profile=profile))
    plan = with_workspace(graph, plan, profile)
    workspace = plan.devices[0].workspace_bytes
    assert workspace > 0
    model = read_model(model_path(NAME))
    executor = PlanExecutor(model, plan)
    executor.load_inputs(read_npz(inputs_path(NAME), model))
    for _ in range(3):
        executor.step()
    zone = executor.arenas["cuda:0"].zone
    assert zone is not None and zone.size == workspace
    assert 0 < zone.peak <= workspace and zone.in_use == 0  # kernels' scratch came from it
    assert np.isfinite(executor.outputs()[next(iter(plan.graph_outputs))]).all()
