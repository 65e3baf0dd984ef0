"""Plans with recomputation and with two devices, built from explicit schedules.

The runtime's tests build such plans themselves, quicker than the remat solver and with copies
between devices, which its one-device plans lack: a schedule (planner.memory.schedule events) goes
through planner.plan.builder and is checked by planner.plan.validate like any solver's output.
tests/runtime/test_runtime_schedules.py checks that the plans made here are what they claim.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

from planner.ir.graph import Graph, Region, load_graph
from planner.memory.schedule import Compute, Copy, Event, Schedule, free_after_last_read
from planner.pipeline import plan_model
from planner.plan.builder import build_plan
from planner.plan.validate import validate_plan
from schemas.plan import Plan, PlanRequest
from tests.support.fixture_zoo import model_path

GENEROUS = 2**40


@cache
def fixture_graph(name: str) -> Graph:
    return load_graph(model_path(name))


@cache
def full_budget_plan(name: str) -> Plan:
    """The pipeline's plan with no budget pressure (100% budget: nothing recomputed)."""
    return plan_model(model_path(name), PlanRequest(budgets={"cpu": GENEROUS}, time_limit_s=1))


def explicit_schedule(
    graph: Graph,
    device_of: Callable[[int], str],
    home: dict[int, str],
    recompute_before: dict[int, list[int]] | None = None,
) -> Schedule:
    """Every op once in file order on `device_of(op)`, ops in `recompute_before[op]` run again
    (recompute=True) right before `op`; copies bring inputs to the op's device, graph outputs
    end on their home device; every materialization not kept is freed right after its last
    read (kept: state, constants and graph outputs on their home device)."""
    recompute_before = recompute_before or {}
    raw: list[Event] = []
    held = dict.fromkeys((t.id, home[t.id]) for t in graph.tensors if t.producer is None)

    def bring(t: int, device: str) -> None:
        if (t, device) in held:
            return
        source = next(d for (u, d) in held if u == t)
        raw.append(Copy(t, source, device))
        held[(t, device)] = None

    def compute(op_id: int, recompute: bool) -> None:
        op = graph.ops[op_id]
        device = device_of(op_id)
        for t in op.input_ids:
            bring(t, device)
        raw.append(Compute(op_id, device, recompute=recompute))
        held.update(dict.fromkeys((t, device) for t in op.output_ids))

    for op in graph.ops:
        for again in recompute_before.get(op.id, []):
            compute(again, True)
        compute(op.id, False)
    for t in graph.outputs:
        bring(t, home[t])
    return Schedule(events=tuple(free_after_last_read(graph, raw, home)), home=home)


def recompute_choices(graph: Graph, every: int = 2) -> dict[int, list[int]]:
    """Forward ops with one output that backward reads after the forward is done with it:
    every `every`-th of them is recomputed right before its first backward reader."""
    chosen: dict[int, list[int]] = {}
    candidates = []
    for op in graph.ops:
        if op.region is not Region.FORWARD or len(op.output_ids) != 1 or op.op_type == "Constant":
            continue
        t = graph.tensors[op.output_ids[0]]
        if t.is_graph_output:
            continue
        forward = [c for c in t.consumers if graph.ops[c].region is Region.FORWARD]
        backward = [c for c in t.consumers if graph.ops[c].region is not Region.FORWARD]
        if backward and (not forward or max(forward) < min(backward)):
            candidates.append((op.id, min(backward)))
    for k, (op_id, reader) in enumerate(candidates):
        if k % every == 0:
            chosen.setdefault(reader, []).append(op_id)
    return chosen


def recompute_plan(name: str, every: int = 2) -> Plan:
    graph = fixture_graph(name)
    home = _home(graph, lambda op: "cpu", "cpu")
    schedule = explicit_schedule(graph, lambda op: "cpu", home, recompute_choices(graph, every))
    return _plan(graph, schedule, {"cpu": GENEROUS}, f"{name}-recompute")


def two_device_plan(name: str, second_every: int = 3) -> Plan:
    """Every `second_every`-th op on cpu:1, the rest on cpu; each state lives where its update
    runs, data and constants on cpu; copies move values between the two arenas."""
    graph = fixture_graph(name)

    def device_of(op: int) -> str:
        return "cpu:1" if op % second_every == second_every - 1 else "cpu"

    home = _home(graph, device_of, "cpu")
    schedule = explicit_schedule(graph, device_of, home)
    return _plan(graph, schedule, {"cpu": GENEROUS, "cpu:1": GENEROUS}, f"{name}-two-device")


def _home(graph: Graph, device_of: Callable[[int], str], default: str) -> dict[int, str]:
    home = {t.id: default for t in graph.tensors if t.producer is None or t.is_graph_output}
    for t in graph.tensors:
        if t.updated_by is not None:
            updater = graph.tensors[t.updated_by].producer
            where = device_of(updater) if updater is not None else default
            home[t.id] = home[t.updated_by] = where
    return home


def _plan(graph: Graph, schedule: Schedule, budgets: dict[str, int], plan_id: str) -> Plan:
    request = PlanRequest(budgets=budgets, time_limit_s=2)
    built = build_plan(graph, schedule, request, plan_id=plan_id, planner_version="test",
                       solvers=[], layout_time_limit=2.0)
    report = validate_plan(graph, built.plan)
    assert report.ok, report.errors[:5]
    return built.plan
