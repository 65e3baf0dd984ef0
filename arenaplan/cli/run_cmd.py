"""`arenaplan run MODEL.onnx --plan plan.json [--steps N] [--check]`: train in the plan's arenas.

Executes N training steps of the plan with the bundled runtime (one fixed arena per device, every
kernel writing into its planned slice), printing the loss and time of every step, the arena bytes
per device and the process's peak resident memory during the steps (VmHWM over the resident set
before them, the arenas' page-in included) against what the plan reserves (arenas and kernel
workspaces) and its budget; --strict-memory fails the run (exit 1) when that peak exceeds the
host budget plus the fixed overhead runtime.measure states. With --check every step is also
run by one whole-graph ONNX Runtime session on the same inputs (state fed back on both sides) and
the largest absolute difference over all outputs is reported; the exit code is 1 when it exceeds
--tolerance. The plan comes from a file or from a server (--server URL --plan-id ID).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from arenaplan.cli.common import EXIT_OK

if TYPE_CHECKING:  # the runtime is imported when the command runs, not when the CLI starts
    from runtime.executor import PlanExecutor
    from runtime.measure import PeakGrowth
    from schemas.plan import Plan

EXIT_CHECK_FAILED = 1


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "run", help="run training steps of a plan inside its fixed arenas (the bundled runtime)",
        description=__doc__.splitlines()[0] + " Exit 0 on success, 1 when --check finds a "
        "difference above --tolerance, 2 when the plan cannot run (other model, unknown schema "
        "version, over-budget arena, invalid plan, missing device, bad inputs, server refusal).",
    )
    parser.add_argument("model", help="the ONNX training graph the plan was made for")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--plan", help="plan JSON file (from `arenaplan plan -o`)")
    source.add_argument("--server", metavar="URL", help="plan server, e.g. http://host:8000")
    parser.add_argument("--plan-id", help="plan id to fetch from --server")
    parser.add_argument("--api-key", help="bearer token for --server (default: "
                        "$ARENAPLAN_API_KEY)")
    parser.add_argument("--wait", type=float, default=0.0, metavar="S",
                        help="keep polling a plan the server is still solving for up to S s")
    parser.add_argument("--steps", type=int, default=1, help="training steps to run (default 1)")
    parser.add_argument("--inputs", metavar="NPZ",
                        help="values for every graph input (default: generated, see "
                        "runtime.inputs)")
    parser.add_argument("--seed", type=int, default=0, help="seed of generated inputs")
    parser.add_argument("--check", action="store_true",
                        help="compare every output of every step with a whole-graph ONNX "
                        "Runtime session")
    parser.add_argument("--tolerance", type=float, default=None,
                        help="largest max-abs difference --check accepts (default 1e-5, or 1e-4 "
                        "for a plan of ONNX Runtime's optimized graph, checked against its "
                        "default session on the model as sent)")
    parser.add_argument("--loss", help="output to print as the loss (default: the first scalar "
                        "float output that is not a state update)")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads (default 1)")
    parser.add_argument("--no-fuse", action="store_true",
                        help="one ONNX Runtime session per op instead of per segment of ops")
    parser.add_argument("--optimization", default="disable",
                        choices=["disable", "basic", "extended", "all"],
                        help="onnxruntime graph optimization level of the kernel sessions "
                        "(default disable)")
    parser.add_argument("--no-validate", action="store_true",
                        help="skip the planner's validator (the runtime's own structural check "
                        "always runs)")
    parser.add_argument("--strict-memory", action="store_true",
                        help="pin glibc's malloc thresholds (freed kernel scratch goes back to "
                        "the OS; costs page faults) and exit 1 when the process's peak during "
                        "the steps exceeds the plan's host budget plus the fixed per-process "
                        "overhead (16 MiB); not with --check, whose reference session shares "
                        "the process")
    parser.add_argument("--json", action="store_true", help="print one JSON report instead")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from runtime.errors import InputValuesError
    from runtime.executor import ExecutorOptions, PlanExecutor
    from runtime.inputs import generated_inputs, loss_output, read_npz
    from runtime.measure import PeakGrowth, pin_malloc_thresholds, reset_peak_rss
    from runtime.model import read_model
    from runtime.reference import ReferenceSession, check_reference, compare_outputs

    if args.steps < 1:
        raise InputValuesError("--steps must be at least 1")
    if args.threads < 1:
        raise InputValuesError("--threads must be at least 1")
    if args.strict_memory and args.check:
        raise InputValuesError("--strict-memory judges the process's own peak, and --check runs "
                               "ONNX Runtime's reference session in the same process: run them "
                               "separately")
    if args.strict_memory and not reset_peak_rss():
        raise InputValuesError("--strict-memory needs a resettable peak RSS (Linux "
                               "/proc/self/clear_refs), which this OS does not offer")
    if args.strict_memory:
        pin_malloc_thresholds()  # freed kernel scratch goes back to the OS (runtime.measure)
    model = read_model(args.model)
    plan = _load_plan(args)
    reference_level, tolerance = check_reference(plan, args.optimization)
    args.tolerance = tolerance if args.tolerance is None else args.tolerance
    validator = None if args.no_validate else _planner_validator(Path(args.model))
    executor = PlanExecutor(
        model, plan, validator=validator,
        options=ExecutorOptions(threads=args.threads, optimization=args.optimization,
                                fuse=not args.no_fuse),
    )
    values = read_npz(args.inputs, model) if args.inputs else generated_inputs(plan, args.seed)
    loss_name = loss_output(plan, args.loss)
    reference = None
    if args.check:
        reference = ReferenceSession(model, plan.state_updates, threads=args.threads,
                                     optimization=reference_level)
        reference.load_inputs(values)
    executor.load_inputs(values)

    say = (lambda *a: None) if args.json else print
    say(f"plan {plan.plan_id}: {len(plan.steps)} steps "
        f"({_count(plan, 'compute')} compute, {_count(plan, 'recompute')} recomputed, "
        f"{_count(plan, 'copy')} copies); {executor.segment_count} segments of compute steps "
        f"run by {executor.session_count} ONNX Runtime sessions")
    for device, size in executor.arena_bytes.items():
        say(f"  {device}: arena {_fmt_bytes(size)} ({size} B), allocated once")
    rows = []
    # The process's peak over its resident set before the first step; re-armed before each
    # step so a --check reference run's transient peaks are left out (what it keeps is not).
    memory = PeakGrowth.start()
    for k in range(args.steps):
        memory.rearm()
        seconds = executor.step()
        row: dict[str, Any] = {"step": k + 1, "seconds": seconds,
                               "peak_rss_growth_bytes": memory.sample()}
        if loss_name is not None:
            row["loss"] = float(executor.output(loss_name).reshape(-1)[0])
        if reference is not None:
            row["reference_seconds"] = reference.step()
            diffs = compare_outputs(executor.outputs(), reference.last)
            worst = max(diffs, key=diffs.__getitem__)
            row["max_abs_diff"] = diffs[worst]
            row["worst_output"] = worst
            if loss_name is not None:
                row["reference_loss"] = float(reference.last[loss_name].reshape(-1)[0])
        rows.append(row)
        say(_step_line(row, args.steps))

    report = _report(args, plan, executor, rows, loss_name)
    report["memory"] = _memory_report(plan, memory, with_reference=args.check)
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        _print_summary(report)
    failed = False
    if args.check and not report["check_ok"]:
        print(f"arenaplan: check failed: max abs difference {report['max_abs_diff']:.3g} "
              f"> tolerance {args.tolerance:g}", file=sys.stderr)
        failed = True
    if args.strict_memory and not report["memory"]["within_budget"]:
        m = report["memory"]
        print(f"arenaplan: memory over budget: the process's peak during the steps grew "
              f"{_fmt_bytes(m['peak_growth_bytes'])} ({m['peak_growth_bytes']} B), more than the "
              f"host budget {_fmt_bytes(m['budget_bytes'])} plus the fixed overhead "
              f"{_fmt_bytes(m['overhead_bytes'])}", file=sys.stderr)
        failed = True
    return EXIT_CHECK_FAILED if failed else EXIT_OK


def _load_plan(args: argparse.Namespace) -> Plan:
    from runtime.client import fetch_plan
    from runtime.errors import PlanFetchError
    from runtime.plan_io import read_plan

    if args.plan:
        if args.plan_id:
            raise PlanFetchError("--plan-id goes with --server, not with --plan")
        return read_plan(args.plan)
    if not args.plan_id:
        raise PlanFetchError("--server needs --plan-id ID (the id `arenaplan plan` or the "
                             "service reported)")
    return fetch_plan(args.server, args.plan_id, api_key=args.api_key, wait_s=args.wait)


def _planner_validator(model_path: Path) -> Callable[[Plan], list[str]]:
    """The planner's independent validator, loaded only once the runtime's own checks pass.

    The runtime never imports the planner; the CLI may, and injects it."""

    def validate(plan: Plan) -> list[str]:
        from planner.ir.graph import load_plan_graph
        from planner.plan.validate import validate_plan

        graph = load_plan_graph(model_path, plan)
        return list(validate_plan(graph, plan).errors)

    return validate


def _count(plan: Plan, kind: str) -> int:
    if kind == "recompute":
        return sum(1 for s in plan.steps if s.kind == "compute" and s.recompute)
    return sum(1 for s in plan.steps if s.kind == kind)


def _step_line(row: dict[str, Any], total: int) -> str:
    parts = [f"step {row['step']}/{total}:"]
    if "loss" in row:
        parts.append(f"loss {row['loss']:.6f}")
    parts.append(f"{row['seconds'] * 1e3:.2f} ms")
    if "max_abs_diff" in row:
        parts.append(f"(ONNX Runtime: {row['reference_seconds'] * 1e3:.2f} ms, max abs diff "
                     f"{row['max_abs_diff']:.2e} in {row['worst_output']})")
    return " ".join(parts)


def _report(args: argparse.Namespace, plan: Plan, executor: PlanExecutor,
            rows: list[dict[str, Any]], loss_name: str | None) -> dict[str, Any]:
    median = statistics.median(r["seconds"] for r in rows)
    report = {
        "plan_id": plan.plan_id,
        "model_sha256": plan.model_sha256,
        "steps": rows,
        "loss_output": loss_name,
        "arena_bytes": executor.arena_bytes,
        "segments": executor.segment_count,
        "sessions": executor.session_count,
        "median_step_seconds": median,
        "predicted_step_seconds": plan.predicted_seconds,
        "threads": args.threads,
    }
    if args.check:
        worst = max(r["max_abs_diff"] for r in rows)
        ref_median = statistics.median(r["reference_seconds"] for r in rows)
        report.update({
            "reference_median_step_seconds": ref_median,
            "time_vs_reference": median / ref_median if ref_median > 0 else None,
            "max_abs_diff": worst,
            "tolerance": args.tolerance,
            "check_ok": worst <= args.tolerance,
        })
    return report


def _memory_report(plan: Plan, memory: PeakGrowth, with_reference: bool) -> dict[str, Any]:
    """The process's peak during the steps against what the plan reserves and its budget."""
    from runtime.measure import (
        HOST_OVERHEAD_BYTES,
        host_budget_bytes,
        host_devices,
        host_reserved_bytes,
    )

    peaks = memory.peaks
    peak = max(peaks)
    budget = host_budget_bytes(plan)
    return {
        "measured": memory.reset_ok,
        "peak_growth_bytes": peak,
        "first_step_bytes": peaks[0],
        "later_steps_add_bytes": max(0, max(peaks[1:], default=peaks[0]) - peaks[0]),
        "reserved_bytes": host_reserved_bytes(plan),
        "workspace_bytes": sum(d.workspace_bytes for d in host_devices(plan)),
        "budget_bytes": budget,
        "overhead_bytes": HOST_OVERHEAD_BYTES,
        "within_budget": memory.reset_ok and peak <= budget + HOST_OVERHEAD_BYTES,
        "with_reference": with_reference,
    }


def _print_summary(report: dict[str, Any]) -> None:
    line = f"median step time {report['median_step_seconds'] * 1e3:.2f} ms"
    if report["predicted_step_seconds"] is not None:
        line += f" (plan predicted {report['predicted_step_seconds'] * 1e3:.2f} ms)"
    if "reference_median_step_seconds" in report:
        line += (f"; whole-graph ONNX Runtime {report['reference_median_step_seconds'] * 1e3:.2f}"
                 f" ms ({report['time_vs_reference']:.2f}x)")
    print(line)
    m = report["memory"]
    if m["measured"]:
        print(f"peak RSS growth during the steps: {_fmt_bytes(m['peak_growth_bytes'])} (step 1 "
              f"{_fmt_bytes(m['first_step_bytes'])}, touching the arenas; later steps add "
              f"{_fmt_bytes(m['later_steps_add_bytes'])}); the plan reserves "
              f"{_fmt_bytes(m['reserved_bytes'])} on the host (arenas + kernel workspace "
              f"{_fmt_bytes(m['workspace_bytes'])}), budget {_fmt_bytes(m['budget_bytes'])} + "
              f"fixed overhead {_fmt_bytes(m['overhead_bytes'])}: "
              f"{'within' if m['within_budget'] else 'OVER'}"
              + (" (includes the --check reference session's memory)" if m["with_reference"]
                 else ""))
    else:
        print("peak RSS: this OS does not let a process reset its peak (arenas "
              f"{_fmt_bytes(sum(report['arena_bytes'].values()))})")
    if "max_abs_diff" in report:
        verdict = "ok" if report["check_ok"] else "FAILED"
        print(f"check {verdict}: max abs difference {report['max_abs_diff']:.2e} over every "
              f"output of every step (tolerance {report['tolerance']:g})")


def _fmt_bytes(n: int | float) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"
