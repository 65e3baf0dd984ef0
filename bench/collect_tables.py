"""Collect every benchmark's markdown table into bench/README.md, the one page of figures.

    .venv/bin/python -m bench.collect_tables

Each benchmark lives in bench/NAME/ with a runner module `bench.NAME.run_NAME_bench` (run from
the repository root) that writes results.json and results.md; this script only gathers the
committed results.md files, so the page always shows what the last runs measured, with the
command that regenerates each table.
"""

from __future__ import annotations

import platform
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
SECTIONS = {
    "order": "Operator ordering: peak live bytes vs the file order (issue 5)",
    "layout": "Arena layout: fixture plans, real traces of keep-everything plans (batch 4-128), "
              "tight synthetic instances; at the bound or the gap (issues 5 and 17)",
    "profile": "Operator profiling: wall time, cold and warm cache (issue 3)",
    "remat": "Rematerialization: budget vs predicted overhead, ours vs baselines (issue 4)",
    "runtime": "Runtime: process peak vs arena + workspace, step time vs ONNX Runtime, segments, "
               "threads (issues 6 and 16)",
    "service": "Service: concurrent requests, cached-plan latency (issues 7 and 15)",
    "memory": "Memory: keep-everything arena vs PyTorch eager and ONNX Runtime, before and "
              "after views and in-place writes (issue 13)",
}

# Tables a bench writes besides its results.md: (title, table relative to bench/, runner module).
EXTRA = [
    ("Memory: plans at the issue-13 targets (0.8x PyTorch eager, 0.5x ONNX Runtime) as a "
     "budget, with recomputation where needed (issue 13)", "memory/targets.md",
     "bench.memory.run_target_bench"),
    ("Memory: what the late recomputation of cheap values saves and costs in the "
     "keep-everything plan (issue 13)", "memory/late_recompute.md",
     "bench.memory.late_recompute_cost"),
    ("Runtime: the real planner's plans at 100%, 50% and the minimum budget vs ONNX Runtime "
     "(issue 6)", "runtime/remat_check.md", "bench.runtime.check_remat_plans"),
    ("Runtime: plans of ONNX Runtime's optimized graph vs its default session (issue 16)",
     "runtime/optimized_graphs.md", "bench.runtime.optimized_graphs"),
    ("Rematerialization at persistent + 50% / 30% of the activation bytes, whole request "
     "timed, plans run (issue 14)", "remat/budgets.md", "bench.remat.run_budget_bench"),
    ("Rematerialization on small graphs vs the proven optimum (issue 14)", "remat/small.md",
     "bench.remat.run_small_bench"),
    ("Time limits kept: whole requests on the shapes that overran them (issue 14)",
     "remat/limits.md", "bench.remat.run_limits_bench"),
    ("Profiling: estimated vs measured op costs, where the estimates' factors come from "
     "(issue 16)", "profile/estimates.md", "bench.profile.calibrate_estimates"),
    ("Profiling: the whole-graph workspace measurement's estimated cost vs measured "
     "(issue 16)", "profile/workspace_cost.md", "bench.profile.workspace_cost"),
]


def main() -> int:
    lines = [
        "# Benchmarks",
        "",
        "Every table below is written by the command above it (results.json beside it holds the",
        "raw figures). Regenerate this page with `.venv/bin/python -m bench.collect_tables`.",
        f"Machine of the committed runs: {platform.machine()}, 2 cores, 24 GiB, no GPU, shared",
        "with other work while measuring (timings are noisy; memory figures are exact).",
        "",
    ]
    tables = [(title, BENCH / name / "results.md", f"bench.{name}.run_{name}_bench")
              for name, title in SECTIONS.items()]
    tables += [(title, BENCH / results, runner) for title, results, runner in EXTRA]
    for title, results, runner in tables:
        if not results.exists():
            continue
        lines += [f"## {title}", "", f"`.venv/bin/python -m {runner}`", ""]
        lines += [results.read_text().rstrip(), ""]
    (BENCH / "README.md").write_text("\n".join(lines))
    print(f"wrote {BENCH / 'README.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
