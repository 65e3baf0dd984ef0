"""The planning pipeline end to end on real fixtures, and the validator catching broken plans."""

from __future__ import annotations

import json
import re

import pytest

from arenaplan.cli import main
from planner.errors import InfeasibleError
from planner.ir.graph import load_graph
from planner.memory.liveness import order_lower_bound
from planner.pipeline import plan_graph, plan_model
from planner.pipeline.fit import RematFit, lowered_target
from planner.pipeline.infeasible import raise_infeasible
from planner.plan.validate import validate_plan
from planner.profile import QUICK_POLICY, profile_graph
from planner.profile.workspace import plan_workspace
from planner.time_budget import TimeBudget
from schemas.plan import ComputeStep, FreeStep, Plan, PlanRequest, compute_plan_id
from tests.support.fixture_zoo import model_path

GENEROUS = 2**40


def plan_for(name: str, budget: int = GENEROUS, **options) -> Plan:
    request = PlanRequest(budgets={"cpu": budget}, time_limit_s=options.pop("time_limit", 4),
                          **options)
    return plan_model(model_path(name), request)


@pytest.fixture(scope="module")
def cnn():
    return load_graph(model_path("cnn_bn_momentum")), plan_for("cnn_bn_momentum")


@pytest.mark.parametrize("name", ["mlp_sgd", "cnn_bn_momentum", "gpt2_tiny_adam"])
def test_fixture_plans_validate_and_report_their_arena(name):
    graph = load_graph(model_path(name))
    plan = plan_for(name)
    report = validate_plan(graph, plan)
    assert report.ok, report.errors
    device = plan.devices[0]
    assert device.lower_bound_bytes <= device.arena_bytes <= device.budget_bytes
    assert max(report.live_bytes["cpu"]) <= device.arena_bytes
    assert sum(isinstance(s, ComputeStep) for s in plan.steps) == len(graph.ops)
    assert {r.phase for r in plan.solvers} == {"order", "layout"}
    assert set(plan.graph_outputs) == {graph.tensors[t].name for t in graph.outputs}


def test_plan_ids_are_deterministic_and_json_round_trips(cnn):
    graph, plan = cnn
    assert plan.plan_id == compute_plan_id(graph.model_sha256, plan.request, plan.planner_version)
    again = Plan.model_validate_json(plan.model_dump_json())
    assert again == plan
    other = PlanRequest(budgets={"cpu": GENEROUS}, time_limit_s=5)
    assert compute_plan_id(graph.model_sha256, other, plan.planner_version) != plan.plan_id


def test_state_updates_are_in_place(cnn):
    _, plan = cnn
    by_id = {b.id: b for b in plan.buffers}
    for state, new in plan.state_updates.items():
        old, updated = by_id[plan.graph_inputs[state]], by_id[plan.graph_outputs[new]]
        # SGD momentum (`v.mul_(mu).add_(g)`, `w.sub_(lr * v)`) runs in place as torch's does
        assert updated.storage == old.id and updated.shares == "in_place", state
        assert updated.offset == old.offset and old.zone == "persistent"


def test_budget_below_the_arena_is_infeasible_with_the_size_to_ask_for(cnn):
    _, plan = cnn
    arena = plan.devices[0].arena_bytes
    with pytest.raises(InfeasibleError) as info:
        plan_for("cnn_bn_momentum", budget=arena // 2)
    assert info.value.smallest_feasible is not None
    assert str(info.value.smallest_feasible) in str(info.value)


def test_the_budget_a_refusal_names_gets_a_plan(cnn):
    """At its op-footprint bound cnn_bn_momentum is refused, naming the arena of the smallest
    plan the heuristics make (303,488 B; the keep-everything arena it named before is 385,664
    B). Asked for that budget, the request gets a plan within it, whatever its own search
    found (ResNet-18 was refused again, naming more, when the faster schedules it found laid
    out over the budget it had been told to ask for)."""
    graph, keep_everything = cnn
    with pytest.raises(InfeasibleError) as info:
        plan_for("cnn_bn_momentum", budget=order_lower_bound(graph))
    named = info.value.smallest_feasible
    assert named is not None and not info.value.is_lower_bound
    assert order_lower_bound(graph) < named < keep_everything.devices[0].arena_bytes
    plan = plan_for("cnn_bn_momentum", budget=named)
    assert validate_plan(graph, plan).ok
    assert plan.devices[0].arena_bytes <= named


def test_a_refusal_suggests_more_time_only_when_the_request_ran_out_of_it():
    """MLP at persistent + 50% of its activations (32,156 B) is refused within a few seconds of
    a 30 s limit: its searches end, not the time, so the refusal does not suggest more time
    (UNet-small at + 30% was told "none found in 60 s ... or allow more time" after 32 s)."""
    request = PlanRequest(budgets={"cpu": 32_156}, time_limit_s=30)
    with pytest.raises(InfeasibleError) as info:
        plan_model(model_path("mlp_sgd"), request)
    assert "more time" not in str(info.value)
    graph = load_graph(model_path("mlp_sgd"))
    with pytest.raises(InfeasibleError, match="the searches ended after 3 s of the 30 s allowed"
                       ) as early:
        raise_infeasible(graph, request, None, None, lambda: 40_000, elapsed_s=3.0)
    assert "more time" not in str(early.value)
    with pytest.raises(InfeasibleError, match=r"none found in 30 s.*or allow more time"):
        raise_infeasible(graph, request, None, None, lambda: 40_000, elapsed_s=29.0)


def test_cli_plan_writes_a_plan_and_exit_codes(tmp_path, capsys):
    out = tmp_path / "plan.json"
    model = str(model_path("mlp_sgd"))
    assert main(["plan", model, "--budget", "cpu=1GiB", "--time-limit", "3", "-o", str(out)]) == 0
    plan = Plan.model_validate(json.loads(out.read_text()))
    assert plan.devices[0].budget_bytes == 2**30
    assert main(["plan", model, "--budget", "cpu=1KiB", "--time-limit", "3", "-o",
                 str(out)]) == 3
    assert "ask for at least" in capsys.readouterr().err
    assert main(["plan", model, "--budget", "tpu=1GiB", "-o", str(out)]) == 2
    assert "unknown device 'tpu'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["plan", model, "--budget", "cpu=lots", "-o", str(out)])


def _steps(plan: Plan) -> list:
    return list(plan.steps)


def test_validator_rejects_another_model(cnn):
    _, plan = cnn
    mlp = load_graph(model_path("mlp_sgd"))
    assert "another model" in validate_plan(mlp, plan).errors[0]


def test_validator_rejects_read_after_free(cnn):
    graph, plan = cnn
    steps = _steps(plan)
    k = next(i for i, s in enumerate(steps) if isinstance(s, FreeStep)
             and not any(b.preloaded for b in plan.buffers if b.id == s.buffer))
    freed = steps[k].buffer
    first_read = next(i for i, s in enumerate(steps) if isinstance(s, ComputeStep)
                      and freed in s.inputs)
    steps.insert(first_read, steps.pop(k))
    broken = plan.model_copy(update={"steps": steps})
    assert any("after it was freed" in e for e in validate_plan(graph, broken).errors)


def test_validator_rejects_overlapping_buffers(cnn):
    graph, plan = cnn
    buffers = [b.model_copy() for b in plan.buffers]
    transient = [b for b in buffers if b.zone == "transient" and b.owns_storage
                 and all(o.storage != b.id for o in buffers if o is not b)]
    a, b = next((x, y) for x in transient for y in transient
                if x is not y and x.first_step <= y.last_step and y.first_step <= x.last_step
                and x.offset != y.offset)
    b.offset = a.offset
    broken = plan.model_copy(update={"buffers": buffers})
    assert any("overlap" in e for e in validate_plan(graph, broken).errors)


def test_validator_rejects_a_budget_the_plan_exceeds(cnn):
    graph, plan = cnn
    request = plan.request.model_copy(update={"budgets": {"cpu": plan.devices[0].arena_bytes - 1}})
    broken = plan.model_copy(update={"request": request})
    assert any("exceeds its budget" in e for e in validate_plan(graph, broken).errors)


def test_validator_rejects_a_missing_output(cnn):
    graph, plan = cnn
    loss = graph.tensors[graph.loss]
    steps = [s for s in plan.steps
             if not (isinstance(s, ComputeStep) and s.op_id == loss.producer)]
    broken = plan.model_copy(update={"steps": steps})
    errors = validate_plan(graph, broken).errors
    assert any(f"graph output {loss.name} is not live" in e for e in errors)


@pytest.mark.usefixtures("private_profile_cache")
def test_plans_reserve_the_profiled_kernel_workspace():
    """With a profile (always, once remat runs) every device's workspace is its largest compute
    step's measured scratch (planner.profile.workspace); the runtime reserves it beside the
    arena."""
    graph = load_graph(model_path("cnn_bn_momentum"))
    profile = profile_graph(graph, ["cpu"], policy=QUICK_POLICY)
    plan = plan_graph(graph, PlanRequest(budgets={"cpu": 1 << 30}, profile=profile,
                                         time_limit_s=10))
    assert plan.devices[0].workspace_bytes == plan_workspace(graph, plan, profile)["cpu"] > 0


def test_a_retry_after_fragmentation_aims_below_the_budget_over_the_worst_spread():
    """Remat schedules filled up to the budget fragment by 1-3% when laid out (GPT-2-small at
    persistent + half its activations); lowering the target by the overshoot alone then
    overshoots again, attempt after attempt. The next target leaves room for the worst
    arena / peak ratio seen, and is never above the last target less the excess."""
    budget = 1_000_000
    # The best schedule reached the budget and overshot by 1%; a runner-up spread 2.7%.
    assert lowered_target(budget, budget, 10_000, 1.027, 64) == int(budget / 1.027) - 64
    # A spread smaller than the overshoot: at least the excess comes off.
    assert lowered_target(990_000, budget, 20_000, 1.001, 64) == 970_000 - 64
    assert lowered_target(10, budget, 50, 2.0, 64) == 1


def test_a_retry_aims_no_lower_than_a_quarter_of_the_way_from_the_bound_to_the_budget():
    """Below the op-footprint bound no schedule exists: GPT-2-small at persistent + half its
    activations has 1.7% between them, and the budget over the worst spread (1.8%) fell below
    the bound, so the retry found nothing and the request was refused."""
    graph = load_graph(model_path("mlp_sgd"))
    bound = order_lower_bound(graph)
    for budget in (bound, bound + 4_000, bound + 100_000):
        request = PlanRequest(budgets={"cpu": budget})
        fit = RematFit(graph, request, order=None, costs=None, plan_id="t",
                       clock=TimeBudget(10), keep_all_arena=None)
        assert fit._floor("cpu") == bound + (budget - bound) // 4


def test_a_refusal_below_the_op_footprint_bound_names_the_step_that_sets_it():
    """The bytes a user can change (a smaller batch, a split op) are those of one step: the
    refusal names it, and that op's inputs and outputs beside the state are the bound."""
    graph = load_graph(model_path("cnn_bn_momentum"))
    lower = order_lower_bound(graph)
    with pytest.raises(InfeasibleError) as info:
        plan_model(model_path("cnn_bn_momentum"), PlanRequest(budgets={"cpu": lower - 1}))
    assert info.value.is_lower_bound and info.value.smallest_feasible == lower
    named = re.search(r"state and constants take (\d+) B and op '([^']+)' \((\w+)\) with its "
                      r"inputs and outputs (\d+) B more", str(info.value))
    assert named is not None, str(info.value)
    state, name, op_type, more = named.groups()
    op = next(o for o in graph.ops if o.name == name)
    assert op.op_type == op_type and int(state) + int(more) == lower
    footprint = {*op.input_ids, *op.output_ids}
    assert int(more) <= sum(graph.tensors[t].nbytes for t in footprint)
