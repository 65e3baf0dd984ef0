"""Real planner plans for a fixture at a named budget, and their run through `arenaplan run`.

Issue 6 asks that plans at 100%, 50% and the minimum feasible budget run in their arenas and
equal ONNX Runtime. Those plans must come from the real planner (the pipeline and, for "min",
planner.queries.min_budget), not from hand-built schedules, because only the solver's
plans mix recomputation, reordering and address reuse the way users get them. The bench
(bench/runtime/check_remat_plans.py) runs every fixture and kind; the slow test a subset.

A refusal is an outcome here, not an error: below the proven lower bound the pipeline must
refuse with that bound (nothing to run; the "min" kind covers recomputation), and any other
refusal must name a smallest feasible budget, at which the plan is then made and checked.
"""

from __future__ import annotations

import contextlib
import io
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from planner.errors import InfeasibleError
from planner.ir.graph import load_graph
from planner.memory.liveness import order_lower_bound
from planner.order import optimize_order
from planner.pipeline import plan_model
from planner.queries import min_budget
from runtime.executor import ExecutorOptions
from schemas.plan import ComputeStep, Plan, PlanRequest
from tests.support.fixture_zoo import inputs_path, model_path
from tests.support.reference import TOLERANCE, reference_diffs

SHARES = {"100%": 1.0, "50%": 0.5}
BUDGET_KINDS = (*SHARES, "min")
WORKERS = 2


@dataclass
class BudgetPlan:
    """What the planner answered for one fixture at one budget kind."""

    name: str
    kind: str
    budget: int  # bytes asked for (for "min": the budget min_budget achieved)
    lower_bound: int  # planner.memory.liveness.order_lower_bound: no plan fits below
    keep_all_peak: int  # the heuristic order's peak without recomputation (100%)
    plan: Plan | None = None
    planned_at: int | None = None  # budget the plan was made for (a refusal's smallest feasible)
    refusal: str | None = None  # the InfeasibleError's message at `budget`
    smallest_feasible: int | None = None
    proven: bool = False  # refused below the proven lower bound: nothing to run
    seconds: float = 0.0  # planning time, replanning at smallest_feasible included
    notes: list[str] = field(default_factory=list)


def keep_all_peak(graph) -> int:
    """The heuristic order's peak without recomputation: the 100% every budget share is of."""
    return optimize_order(graph, use_solver=False).peak_bytes


def recompute_count(plan: Plan) -> int:
    return sum(1 for s in plan.steps if isinstance(s, ComputeStep) and s.recompute)


def plan_for_budget(name: str, kind: str, time_limit: float) -> BudgetPlan:
    """The planner's answer for `name` at `kind` ("100%", "50%" or "min")."""
    graph = load_graph(model_path(name))
    peak, lower = keep_all_peak(graph), order_lower_bound(graph)
    started = time.perf_counter()
    if kind == "min":
        result = min_budget(graph, "cpu", time_limit=time_limit, workers=WORKERS)
        return BudgetPlan(name, kind, result.achieved, lower, peak, plan=result.plan,
                          planned_at=result.achieved, seconds=time.perf_counter() - started)
    case = BudgetPlan(name, kind, int(peak * SHARES[kind]), lower, peak)
    try:
        case.plan, case.planned_at = _plan(name, case.budget, time_limit), case.budget
    except InfeasibleError as exc:
        case.refusal, case.smallest_feasible = str(exc), exc.smallest_feasible
        case.proven = exc.is_lower_bound and case.budget < lower
        if case.proven:
            pass
        elif exc.smallest_feasible is None:
            case.notes.append("refused without naming a smallest feasible budget")
        elif exc.is_lower_bound:
            case.notes.append("refused above the proven lower bound without a feasible budget")
        else:
            case.plan = _plan(name, exc.smallest_feasible, time_limit)
            case.planned_at = exc.smallest_feasible
    case.seconds = time.perf_counter() - started
    return case


def _plan(name: str, budget: int, time_limit: float) -> Plan:
    request = PlanRequest(budgets={"cpu": budget}, time_limit_s=time_limit, workers=WORKERS)
    return plan_model(model_path(name), request)


def run_cli_check(name: str, plan: Plan, workdir: Path, steps: int = 5) -> tuple[int, dict]:
    """`arenaplan run MODEL --plan FILE --steps N --inputs NPZ --check --json`, in process:
    the exit code and the JSON report (empty when the command printed none)."""
    from arenaplan.cli import main

    plan_file = workdir / f"{name}.{plan.plan_id[:12]}.plan.json"
    plan_file.write_text(plan.model_dump_json())
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["run", str(model_path(name)), "--plan", str(plan_file), "--steps",
                     str(steps), "--inputs", str(inputs_path(name)), "--check", "--json"])
    text = out.getvalue().strip()
    return code, json.loads(text) if text.startswith("{") else {}


@dataclass
class RunCheck:
    """A plan's run against ONNX Runtime: through the CLI (segments of ops per session) and,
    optionally, through the executor with one session per op."""

    steps: int
    cli_exit: int
    report: dict
    per_op_max_abs_diff: float | None = None

    @property
    def losses(self) -> list[float]:
        return [r["loss"] for r in self.report.get("steps", [])]

    @property
    def reference_losses(self) -> list[float]:
        return [r["reference_loss"] for r in self.report.get("steps", [])]

    @property
    def loss_max_abs_diff(self) -> float | None:
        pairs = list(zip(self.losses, self.reference_losses, strict=True))
        return max((abs(a - b) for a, b in pairs), default=None)

    def failures(self, plan: Plan) -> list[str]:
        """What breaks issue 6's criteria (empty when the run passes): exit 0, every output of
        every step within TOLERANCE, `steps` losses equal to the reference's, the plan's arena."""
        if self.cli_exit != 0 or not self.report:
            return [f"arenaplan run exited {self.cli_exit}"]
        found = []
        if len(self.report["steps"]) != self.steps:
            found.append(f"{len(self.report['steps'])} steps run, not {self.steps}")
        if not self.report["max_abs_diff"] <= TOLERANCE:
            found.append(f"max abs diff {self.report['max_abs_diff']} (segments)")
        if self.per_op_max_abs_diff is not None and not self.per_op_max_abs_diff <= TOLERANCE:
            found.append(f"max abs diff {self.per_op_max_abs_diff} (one session per op)")
        if self.loss_max_abs_diff is None:
            found.append("the report names no loss output")
        elif not self.loss_max_abs_diff <= TOLERANCE:
            found.append(f"losses {self.losses} vs reference {self.reference_losses}")
        if self.report["arena_bytes"] != {d.device: d.arena_bytes for d in plan.devices}:
            found.append(f"arenas {self.report['arena_bytes']} are not the plan's")
        return found


def check_run(name: str, plan: Plan, workdir: Path, steps: int = 5,
              per_op: bool = False) -> RunCheck:
    """Run `plan` through the CLI and, with `per_op`, again with one session per op: the CLI's
    default fuses ops into segments, so each way of executing a step gets checked."""
    code, report = run_cli_check(name, plan, workdir, steps)
    check = RunCheck(steps, code, report)
    if per_op:
        worst = reference_diffs(name, plan, ExecutorOptions(fuse=False), steps)
        check.per_op_max_abs_diff = max(diff for _, diff in worst)
    return check
