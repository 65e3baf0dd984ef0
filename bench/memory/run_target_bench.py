"""Less memory than PyTorch eager and ONNX Runtime on the same step, at what step time (issue 13).

    .venv/bin/python -m bench.memory.run_target_bench [--models a,b] [--time-limit 60]
        [--steps 5]

bench/memory's main table compares the keep-everything arena with PyTorch eager's and ONNX
Runtime's peaks. Where that arena sits on the graph's no-recomputation floor above a target, no
order reaches the target without recomputing: PyTorch's own backward formulas keep fewer values
(GELU's backward reads only its input; the exported graph's decomposition reads its
intermediates). This bench asks the question a user would: with the budget set to the issue's
targets, min(0.8 x PyTorch eager's peak, 0.5 x ONNX Runtime's), each peak as bench/memory
measured it (results.json), does arenaplan plan the step, and how much slower is it predicted
and measured? Each model as the CLI plans it (ONNX Runtime's extended rewrite), our whole
request with --time-limit, the plan run beside the keep-everything plan as in
bench/remat/run_budget_bench. Writes bench/memory/targets.json and targets.md.
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
from pathlib import Path

from bench.memory.run_memory_bench import OUT, SCALE_CASES, TARGETS
from bench.remat.run_budget_bench import keep_everything, plan_at
from schemas.units import format_bytes
from tests.support.fixture_zoo import fixture_names

RESULTS = OUT / "results.json"


def target_budget(row: dict) -> int | None:
    """The issue's targets as one budget: the smaller of 0.8x torch's and 0.5x ORT's peaks."""
    peaks = [row[mode].get("peak") for mode in TARGETS]
    if any(p is None for p in peaks):
        return None
    return int(min(share * peak for share, peak in zip(TARGETS.values(), peaks, strict=True)))


def bench_model(row: dict, time_limit: float, steps: int, tmp: Path) -> dict:
    budget = target_budget(row)
    entry = {"model": row["model"], "torch_peak": row["torch"].get("peak"),
             "ort_peak": row["ort"].get("peak"), "budget_bytes": budget}
    if budget is None:
        return {**entry, "error": "no PyTorch or ONNX Runtime peak in results.json"}
    planned = keep_everything(row["model"], tmp)
    keep = keep_everything(row["model"], tmp, late_recompute=False, costs_of=planned)
    entry.update(ops=len(planned.graph.ops), keep_arena_bytes=keep.plan.devices[0].arena_bytes,
                 keep_predicted_s=keep.plan.predicted_seconds,
                 copies_arena_bytes=planned.plan.devices[0].arena_bytes)
    return {**entry, **plan_at(planned, keep, budget, time_limit, steps, tmp)}


def markdown(results: dict) -> str:
    lines = [
        f"Plans at the issue-13 targets as a budget: min(0.8x PyTorch eager's peak, 0.5x ONNX "
        f"Runtime's default session's), the peaks of the table above. {results['machine']}; "
        f"our whole request with time limit {results['time_limit_s']:g} s (2 CP-SAT workers), "
        "the graph as the CLI plans it (ONNX Runtime's extended rewrite), CPU profile (quick "
        "policy). *keep-everything*: the arena an ample budget gets (the graph without "
        "schemas.late_recompute's copies: no recomputation at all), and that of the graph with "
        "them (the smallest with no recomputation the remat search chose; the budget gets it "
        "when it lies between the two). *overhead*: predicted step time over the "
        "keep-everything plan's (without the copies); *measured*: the runtime (fused, 1 "
        "thread), median thread CPU time of the plan's step over the keep-everything plan's, "
        "interleaved in one process. A refusal names the smallest budget the planner found a "
        "plan for.",
        "",
        "| model | ops | budget | keep-everything without / with copies | arena | "
        "status (method) | overhead | measured overhead | wall s |",
        "|---|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    for e in results["models"]:
        if "error" in e:
            lines.append(f"| {e['model']} | - | - | - | - | {e['error']} | - | - | - |")
            continue
        m = e.get("measured") or {}
        measured = f"{m['cpu_remat_s'] / m['cpu_keep_s']:.3f}" if m else "-"
        over = e.get("overhead")
        status = e["status"] + (f" ({e['method']})" if e.get("method") else "")
        if "smallest_feasible" in e:
            status += f"; smallest found {format_bytes(e['smallest_feasible'])}" \
                if e["smallest_feasible"] else ""
        lines.append(
            f"| {e['model']} | {e['ops']} | {format_bytes(e['budget_bytes'])} | "
            f"{format_bytes(e['keep_arena_bytes'])} / "
            f"{format_bytes(e['copies_arena_bytes']) if 'copies_arena_bytes' in e else '-'} | "
            f"{format_bytes(e['arena_bytes']) if 'arena_bytes' in e else '-'} | {status} | "
            f"{'-' if over is None else f'{over:.3f}'} | {measured} | {e['wall_s']:.1f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join([*fixture_names(), *SCALE_CASES]))
    parser.add_argument("--time-limit", type=float, default=60.0)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    rows = {r["model"]: r for r in json.loads(RESULTS.read_text())["rows"]}
    out = OUT / "targets.json"
    results = {"machine": f"{platform.machine()}, {platform.system()}",
               "time_limit_s": args.time_limit,
               "models": json.loads(out.read_text())["models"] if out.exists() else []}
    order = list(rows)
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            print(f"bench {name}", flush=True)
            entry = bench_model(rows[name], args.time_limit, args.steps, Path(tmp))
            kept = [e for e in results["models"] if e["model"] != name]
            results["models"] = sorted([*kept, entry], key=lambda e: order.index(e["model"]))
            out.write_text(json.dumps(results, indent=1))
            (OUT / "targets.md").write_text(markdown(results))
    print(markdown(results))


if __name__ == "__main__":
    main()
