"""Memory benchmark (issue 13): the keep-everything arena vs PyTorch eager and ONNX Runtime.

    .venv/bin/python -m bench.memory.run_memory_bench [--models NAME ...] [--skip-min-budget]
        [--min-budget-time-limit 60] [--time-limit 30] [--runs 3] [--remeasure]

For every fixture of the zoo and every bench-scale case of bench.memory.models (exported into
bench/models/ on first use, not committed), one model at a time:

- (a) the keep-everything arena (`devices[0].arena_bytes` of a plan with one cpu budget large
  enough for everything) of the planner before issue 13 (commit BEFORE_COMMIT, a git worktree at
  --before-tree, created if missing, never modified) and of this tree; each planned in a fresh
  process by bench/memory/plan_worker.py with that tree first on the import path;
- (b) the peak of a PyTorch eager training step and (c) of ONNX Runtime's default session
  running the exported graph once, each the median over --runs fresh processes
  (bench.memory.step_worker) with glibc's mmap threshold fixed (MALLOC_MMAP_THRESHOLD_=131072):
  the exact bytes of the step's inputs (parameters, buffers, optimizer state, data: the arena
  holds them too) plus the peak resident set growth over the step;
- (d) the file-order liveness peak and the op-footprint bound (planner.memory.liveness), and
  min-budget (planner.queries) under its time limit, before and now (the model as sent) and for
  the graph `arenaplan min-budget` sizes by default (ONNX Runtime's extended rewrite); whether
  a plan exists at the persistent bytes plus half of the keep-everything activation bytes (the
  issue's target);
- the wall time of ordering in the keep-everything plan (its order phase), before and now;
- why: the keep-everything floor of the model as sent (planner.order.floor through
  bench/memory/floor.py: live bytes no order avoids without recomputing; ordering's bound), the
  order phase's gap against it, and the keep-everything arena and floor of the graph
  `arenaplan plan` plans by default, ONNX Runtime's extended rewrite (the graph its default
  session runs too) with schemas.late_recompute's copies: the smallest arena with no
  recomputation chosen by the remat search, which every budget from it up to the
  keep-everything arena of the graph without the copies gets (an ampler budget gets the
  graph without them).

Reruns are cheap: the before figures are cached in bench/memory/before.json and the torch and
ONNX Runtime peaks in results.json, both by the model's sha256 (and time limits), so a rerun
plans the current tree only (--remeasure measures torch and ONNX Runtime again). --models runs
a subset and keeps the other rows of results.json. Writes bench/memory/results.json and
results.md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

from schemas.units import format_bytes
from tests.support.fixture_zoo import fixture_names, inputs_path, model_path

REPO = Path(__file__).resolve().parents[2]
OUT = Path(__file__).resolve().parent
MODELS = REPO / "bench" / "models"
WORKER = OUT / "plan_worker.py"
BEFORE_COMMIT = "e247cd1"
# The bench-scale cases of bench.memory.models (kept here so that this process needs no torch).
SCALE_CASES = ("vgg11_sgd", "resnet18_momentum", "mobilenet_v2_momentum", "unet_adam",
               "bert_small_adam", "gpt2_small_adam")
STEP_ENV = {"MALLOC_MMAP_THRESHOLD_": "131072", "OMP_NUM_THREADS": "1"}
TARGETS = {"torch": 0.8, "ort": 0.5}


def run_json(command: list[str], *, cwd: Path, env: dict[str, str], timeout: float) -> dict:
    """The last stdout line of `command` as JSON, or {"error": why} (failure or timeout)."""
    started = time.perf_counter()
    try:
        done = subprocess.run(command, cwd=cwd, env={**os.environ, **env}, capture_output=True,
                              text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or [f"exit {done.returncode}"]
        return {"error": tail[0][:300], "seconds": time.perf_counter() - started}
    return json.loads(done.stdout.strip().splitlines()[-1])


def model_files(name: str, export_timeout: float) -> tuple[Path, Path]:
    """(MODEL.onnx, MODEL.inputs.npz): a zoo fixture, or a bench-scale case exported first if
    missing (in its own process: the export needs torch and several GiB)."""
    if name not in SCALE_CASES:
        return model_path(name), inputs_path(name)
    onnx_path = MODELS / f"{name}.onnx"
    if not onnx_path.exists():
        done = subprocess.run([sys.executable, "-m", "bench.memory.models", name], cwd=REPO,
                              timeout=export_timeout, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"exporting {name} failed (exit {done.returncode})")
    return onnx_path, MODELS / f"{name}.inputs.npz"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def before_tree(path: Path) -> Path:
    """The planner of BEFORE_COMMIT, checked out as a git worktree at `path` if not there.

    A directory already at `path` is used only when git says its HEAD is BEFORE_COMMIT: a
    leftover tree of other code there once made "before" plan like "now" (MobileNetV2's 87.4 MiB
    read as 69.4 MiB)."""
    if not path.exists():
        subprocess.run(["git", "worktree", "add", "--detach", str(path), BEFORE_COMMIT],
                       cwd=REPO, check=True)
    head = subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=False).stdout.strip()
    wanted = subprocess.run(["git", "rev-parse", BEFORE_COMMIT], cwd=REPO, capture_output=True,
                            text=True, check=True).stdout.strip()
    if head != wanted:
        sys.exit(f"{path} is not a git worktree of {BEFORE_COMMIT} (HEAD {head or 'none'}): "
                 "remove it or pass another --before-tree")
    return path


def plan_figures(tree: Path, what: str, model: Path, time_limit: float, timeout: float,
                 optimization: str = "disable") -> dict:
    extra = [] if optimization == "disable" else ["--optimization", optimization]
    return run_json([sys.executable, str(WORKER), what, str(model), "--time-limit",
                     str(time_limit), *extra], cwd=tree, env={"PYTHONPATH": str(tree)},
                    timeout=timeout)


def floor_figures(model: Path, optimization: str, timeout: float) -> dict:
    """The keep-everything floor of this tree (bench/memory/floor.py) for one graph."""
    return run_json([sys.executable, "-m", "bench.memory.floor", str(model), "--json",
                     "--optimization", optimization], cwd=REPO, env={}, timeout=timeout)


def step_peak(mode: str, name: str, model: Path, inputs: Path, runs: int, timeout: float
              ) -> dict:
    """Median over `runs` fresh processes of the step's peak (loaded bytes + RSS growth)."""
    results = [run_json([sys.executable, "-m", "bench.memory.step_worker", mode, name,
                         str(model), str(inputs)], cwd=REPO, env=STEP_ENV, timeout=timeout)
               for _ in range(runs)]
    failed = [r["error"] for r in results if "error" in r]
    if failed:
        return {"error": failed[0]}
    growth = [r["growth"] for r in results]
    loaded = results[0]["loaded_bytes"]
    return {"peak": loaded + statistics.median(growth), "loaded_bytes": loaded,
            "growth_median": statistics.median(growth), "growth_runs": growth,
            "reset_ok": all(r["reset_ok"] for r in results)}


class Planned:
    """Plan and min-budget figures of one tree, reused from a cache when the model and the
    time limits are the same."""

    def __init__(self, tree: Path, cache: dict, args: argparse.Namespace,
                 optimization: str = "disable"):
        self.tree, self.cache, self.args = tree, cache, args
        self.optimization = optimization  # "disable": the model as sent

    def figures(self, name: str, model: Path, digest: str) -> dict:
        old = self.cache.get(name, {})
        fresh = old.get("sha256") != digest
        entry = {"sha256": digest} if fresh else dict(old)
        plan = entry.get("plan", {})
        if fresh or "error" in plan or plan.get("time_limit_s") != self.args.time_limit:
            entry["plan"] = plan_figures(self.tree, "plan", model, self.args.time_limit,
                                         self.args.plan_timeout, self.optimization)
        budget = entry.get("min_budget", {})
        wanted = self.args.min_budget_time_limit
        if not self.args.skip_min_budget and (fresh or budget.get("time_limit_s") != wanted):
            entry["min_budget"] = {"time_limit_s": wanted, **plan_figures(
                self.tree, "min-budget", model, wanted, 4 * wanted + 600, self.optimization)}
        self.cache[name] = entry
        return entry


def measure(name: str, args: argparse.Namespace, before: Planned, now: Planned,
            extended: Planned, previous: dict) -> dict:
    model, inputs = model_files(name, args.export_timeout)
    digest = sha256(model)
    row: dict = {"model": name, "sha256": digest, "before": before.figures(name, model, digest),
                 "now": now.figures(name, model, digest),
                 "extended": extended.figures(name, model, digest),
                 "floor": {level: floor_figures(model, level, args.plan_timeout)
                           for level in ("disable", "extended")}}
    for mode in ("torch", "ort"):
        old = previous.get(mode)
        reuse = (old and "error" not in old and previous.get("sha256") == digest
                 and not args.remeasure)
        row[mode] = old if reuse else step_peak(mode, name, model, inputs, args.runs,
                                                args.step_timeout)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=[*fixture_names(), *SCALE_CASES])
    parser.add_argument("--time-limit", type=float, default=30.0,
                        help="time limit of the keep-everything plans (arenaplan plan's default)")
    parser.add_argument("--min-budget-time-limit", type=float, default=60.0)
    parser.add_argument("--skip-min-budget", action="store_true")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--remeasure", action="store_true",
                        help="measure torch and ONNX Runtime again even where results.json has "
                        "them for the same model")
    parser.add_argument("--before-tree", type=Path, default=Path("/tmp/before"))
    parser.add_argument("--plan-timeout", type=float, default=1200.0)
    parser.add_argument("--step-timeout", type=float, default=900.0)
    parser.add_argument("--export-timeout", type=float, default=3600.0)
    args = parser.parse_args()
    before_path, results_path = OUT / "before.json", OUT / "results.json"
    cached = json.loads(before_path.read_text()) if before_path.exists() else {}
    before = Planned(before_tree(args.before_tree), cached.get("models", {}), args)
    now = Planned(REPO, {}, args)
    extended = Planned(REPO, {}, args, "extended")
    old = json.loads(results_path.read_text()) if results_path.exists() else {}
    rows = {r["model"]: r for r in old.get("rows", [])}
    for name in args.models:
        previous = rows.get(name, {})
        rows[name] = measure(name, args, before, now, extended, previous)
        before_path.write_text(json.dumps({"commit": BEFORE_COMMIT, "models": before.cache},
                                          indent=1))
        print(summary(rows[name]), flush=True)
        machine = f"{platform.processor() or platform.machine()}, {platform.system()}"
        ordered = [rows[n] for n in [*fixture_names(), *SCALE_CASES] if n in rows]
        results_path.write_text(json.dumps({"machine": machine, "before_commit": BEFORE_COMMIT,
                                            "rows": ordered}, indent=1))
        (OUT / "results.md").write_text(table(ordered, machine))
    print((OUT / "results.md").read_text())
    return 0


# --------------------------------------------------------------------------- table


def ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or not b else a / b


def cell(n: float | None) -> str:
    return "-" if n is None else format_bytes(n)


def pair(a: str, b: str) -> str:
    return f"{a} / {b}"


def fits_half(side: dict) -> str:
    """Whether a plan exists at persistent + 50% of the keep-everything activation bytes."""
    plan, budget = side.get("plan", {}), side.get("min_budget", {})
    if "arena_bytes" not in plan:
        return "-"
    target = plan["persistent_bytes"] + (plan["arena_bytes"] - plan["persistent_bytes"]) / 2
    if plan["op_footprint_bound"] > target:
        return "no (bound)"
    if "achieved" not in budget:
        return "-"
    return "yes" if budget["achieved"] <= target else "not found"


def figures(row: dict) -> dict:
    b, n = row["before"].get("plan", {}), row["now"].get("plan", {})
    torch_peak, ort_peak = row["torch"].get("peak"), row["ort"].get("peak")
    return {"before": b.get("arena_bytes"), "now": n.get("arena_bytes"),
            "torch": torch_peak, "ort": ort_peak,
            "vs_torch": ratio(n.get("arena_bytes"), torch_peak),
            "vs_ort": ratio(n.get("arena_bytes"), ort_peak)}


def flag(value: float | None, target: float) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}" + ("" if value <= target else " ✗")


def summary(row: dict) -> str:
    f = figures(row)
    return (f"{row['model']}: arena before {cell(f['before'])}, now {cell(f['now'])}; torch "
            f"{cell(f['torch'])}, ORT {cell(f['ort'])}; now/torch {flag(f['vs_torch'], 0.8)}, "
            f"now/ORT {flag(f['vs_ort'], 0.5)}")


def table(rows: list[dict], machine: str) -> str:
    lines = [
        f"Keep-everything arena (one cpu budget large enough for everything, time limit "
        f"{_limit(rows, 'plan')} s) of the planner before issue 13 (commit {BEFORE_COMMIT}) and "
        "now, vs the peak of a PyTorch eager training step (torch.optim, in place, 1 thread) and "
        "of ONNX Runtime's default session running the exported graph once. Peaks: the exact "
        "bytes of the step's inputs (parameters, buffers, optimizer state, data), which the "
        "arena holds too, plus the peak resident set growth over the step (VmHWM, "
        "MALLOC_MMAP_THRESHOLD_=131072, second step of a fresh process, median of "
        f"{_runs(rows)}). Targets: arena <= {TARGETS['torch']}x torch and <= "
        f"{TARGETS['ort']}x ONNX Runtime (✗: missed). {machine}.",
        "",
        "| model | ops | persistent | arena before | arena now | now / before | torch eager "
        "| ORT default | now / torch | now / ORT | order s before / now |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        f = figures(row)
        b, n = row["before"].get("plan", {}), row["now"].get("plan", {})
        lines.append(
            f"| {row['model']} | {n.get('ops', b.get('ops', '-'))} | "
            f"{cell(n.get('persistent_bytes'))} | {cell(f['before'])} | {cell(f['now'])} | "
            f"{_fmt(ratio(f['now'], f['before']))} | {cell(f['torch'])} | {cell(f['ort'])} | "
            f"{flag(f['vs_torch'], TARGETS['torch'])} | {flag(f['vs_ort'], TARGETS['ort'])} | "
            f"{pair(_secs(b.get('order_seconds')), _secs(n.get('order_seconds')))} |")
    lines += [
        "",
        "Bounds, before / now / default graph: the model as sent before issue 13 and now, and "
        "the graph `arenaplan min-budget` sizes by default (ONNX Runtime's extended rewrite, "
        "with schemas.late_recompute's copies): the file-order liveness peak and the "
        "op-footprint bound (planner.memory.liveness: state, constants and one op's inputs and "
        "outputs; no schedule of that graph's ops goes below it, whatever it recomputes), "
        "min-budget (planner.queries, time limit "
        f"{_limit(rows, 'min_budget')} s; the achieved budget, a validated plan's arena, and "
        "the query's seconds), and whether a plan exists at the persistent bytes plus half of "
        "that graph's keep-everything activation bytes ('no (bound)': below the op-footprint "
        "bound; 'not found': min-budget found none). The default graph's half is of its arena "
        "with the copies, below the one bench/remat's shares are of.",
        "",
        "| model | file-order peak | op-footprint bound | min-budget | min-budget s "
        "| fits at persistent + 50% |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for row in rows:
        sides = (row["before"], row["now"], row.get("extended", {}))
        lines.append(
            f"| {row['model']} | {_each(sides, 'plan', 'file_order_peak')} | "
            f"{_each(sides, 'plan', 'op_footprint_bound')} | "
            f"{_each(sides, 'min_budget', 'achieved')} | "
            f"{_each(sides, 'min_budget', 'seconds', _secs)} | "
            f"{' / '.join(fits_half(side) for side in sides)} |")
    lines += why_table(rows)
    errors = failures(rows)
    if errors:
        lines += ["", "Failed or timed out: " + "; ".join(errors) + "."]
    return "\n".join(lines) + "\n"


def why_table(rows: list[dict]) -> list[str]:
    """The floor of the model as sent and of the graph `arenaplan plan` plans by default."""
    lines = [
        "",
        "Why, now: the keep-everything floor (planner.order.floor, through "
        "bench/memory/floor.py: the live bytes no order avoids without recomputing values, "
        "ordering's lower bound; the arena may sit above it by fragmentation and "
        "by the order) of the model as sent, and the keep-everything arena and floor of the "
        "graph `arenaplan plan` plans by default (ONNX Runtime's extended rewrite, which its "
        "default session runs too: transposes folded into fused matrix products; with "
        "schemas.late_recompute's copies, which every budget from that arena up to the "
        "keep-everything arena of the graph without them gets). A floor above "
        f"{TARGETS['torch']}x torch means that target needs recomputation (or a graph that "
        "keeps fewer values). The order gap is the keep-everything plan's order phase against "
        "its reported bound (the floor: ordering's lower bound).",
        "",
        "| model | arena now | floor | floor / torch | arena, extended graph | floor, extended "
        "| extended / torch | extended / ORT | order gap now / extended |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        f = figures(row)
        floors = row.get("floor", {})
        plain, ext = floors.get("disable", {}).get("floor"), floors.get("extended", {}).get("floor")
        ext_arena = row.get("extended", {}).get("plan", {}).get("arena_bytes")
        lines.append(
            f"| {row['model']} | {cell(f['now'])} | {cell(plain)} | "
            f"{flag(ratio(plain, f['torch']), TARGETS['torch'])} | {cell(ext_arena)} | "
            f"{cell(ext)} | {flag(ratio(ext_arena, f['torch']), TARGETS['torch'])} | "
            f"{flag(ratio(ext_arena, f['ort']), TARGETS['ort'])} | "
            f"{pair(_gap(row['now']), _gap(row.get('extended', {})))} |")
    return lines


def _gap(side: dict) -> str:
    """The keep-everything plan's order phase gap against its bound (the floor, or the
    op-footprint bound in trees before the floor was ordering's bound)."""
    gap = side.get("plan", {}).get("order_gap")
    return "-" if gap is None else f"{gap:.2%}"


def failures(rows: list[dict]) -> list[str]:
    found = []
    for row in rows:
        parts = {"before plan": row["before"].get("plan", {}),
                 "before min-budget": row["before"].get("min_budget", {}),
                 "now plan": row["now"].get("plan", {}),
                 "now min-budget": row["now"].get("min_budget", {}),
                 "extended plan": row.get("extended", {}).get("plan", {}),
                 "extended min-budget": row.get("extended", {}).get("min_budget", {}),
                 **{f"{level} floor": part for level, part in row.get("floor", {}).items()},
                 "torch": row["torch"], "ORT": row["ort"]}
        found += [f"{row['model']} {what}: {part['error']}" for what, part in parts.items()
                  if "error" in part]
    return found


def _each(sides: tuple[dict, ...], part: str, key: str, show=cell) -> str:
    return " / ".join(show(side.get(part, {}).get(key)) for side in sides)


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _secs(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _limit(rows: list[dict], part: str) -> str:
    limits = {row["now"].get(part, {}).get("time_limit_s") for row in rows} - {None}
    return "/".join(f"{v:g}" for v in sorted(limits)) or "-"


def _runs(rows: list[dict]) -> int:
    return max((len(row["torch"].get("growth_runs", [])) for row in rows), default=0)


if __name__ == "__main__":
    sys.exit(main())
