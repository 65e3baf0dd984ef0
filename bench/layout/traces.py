"""Buffer traces of real training plans, written as layout CSV for `arenaplan layout --csv`.

    .venv/bin/python -m bench.layout.traces [NAME ...] [--cached]

A trace is the arena instance of a real plan: the keep-everything plan (one cpu budget large
enough for everything) of a bench-scale training step, with shared storage as one buffer (only
storage owners are laid out, over the union of their buffers' ranges: planner.plan.live), raw
byte sizes and no alignment column (the format's convention: alignment 1). Persistent storages
(parameters, optimizer state) are plain buffers live over the whole step. The models are
exported on first use (bench.layout.trace_models, needs torch; minutes each) into bench/models/
(not committed). Traces of up to 2,500 buffers (under 100 KB) are written to and committed in
bench/layout/traces/, larger ones go to bench/models/traces/ (not committed, to keep the
repository small); `run_layout_bench` measures every trace found in either. With --cached, the
traces of the bench-scale models already in bench/models/ (the memory and ordering benches'
exports, batch 4 to 16) are written too, as ``cached_<model>``.
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from planner.layout import Buffer, read_buffers_csv
from planner.plan.live import storage_ranges

COMMITTED = Path(__file__).resolve().parent / "traces"
GENERATED = Path(__file__).resolve().parents[1] / "models" / "traces"
COMMIT_LIMIT = 2500  # buffers: larger traces are not committed
EVERYTHING = 1 << 50

# (model, batch): ~800 (resnet18) to ~15,000 (gpt2_d96) buffers; see bench.layout.trace_models
CASES = (
    ("resnet18", 16), ("resnet18", 64), ("resnet18", 128),
    ("mobilenet_v2", 16), ("mobilenet_v2", 32),
    ("resnet50", 32), ("resnet50", 128),
    ("resnet101", 32), ("resnet152", 16), ("resnet152", 64),
    ("gpt2_d48", 16), ("gpt2_d48", 64), ("gpt2_d96", 32),
)


def case_names() -> list[str]:
    return [f"{model}_b{batch}" for model, batch in CASES]


def plan_buffers(onnx_path: Path, time_limit: float = 60.0) -> list[Buffer]:
    """The storage owners of the keep-everything plan of ``onnx_path``, over their ranges."""
    from planner.ir.graph import load_graph
    from planner.pipeline import plan_graph
    from schemas.plan import PlanRequest

    plan = plan_graph(load_graph(onnx_path),
                      PlanRequest(budgets={"cpu": EVERYTHING}, time_limit_s=time_limit))
    return [Buffer(owner.id, first, last + 1, max(owner.size, 1))
            for owner, first, last in storage_ranges(plan.buffers)]


def write_trace_csv(path: Path, buffers: Sequence[Buffer]) -> None:
    """``id,lower,upper,size`` rows (half-open lifetimes), the common layout CSV format."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(("id", "lower", "upper", "size"))
        writer.writerows((b.id, b.lower, b.upper, b.size) for b in buffers)


def make_trace(name: str) -> Path:
    """NAME.csv (see the module docstring for where), exporting and planning the model first
    if missing."""
    from bench.layout.trace_models import EXPORT_TOLERANCE, TraceCase, fixture
    from bench.scale_models import export_cached

    for folder in (COMMITTED, GENERATED):
        if (folder / f"{name}.csv").exists():
            return folder / f"{name}.csv"
    model, _, batch = name.rpartition("_b")
    case = TraceCase(model, int(batch))
    return write_trace(name, plan_buffers(export_cached(fixture(case), EXPORT_TOLERANCE)))


def write_trace(name: str, buffers: Sequence[Buffer]) -> Path:
    path = (COMMITTED if len(buffers) <= COMMIT_LIMIT else GENERATED) / f"{name}.csv"
    write_trace_csv(path, buffers)
    return path


def cached_traces() -> list[Path]:
    """``cached_<model>.csv`` for every bench-scale model in bench/models/ but the traces' own
    exports, planned first if missing."""
    from bench.scale_models import MODELS

    paths = []
    for onnx_path in sorted(MODELS.glob("*.onnx")):
        if onnx_path.stem.startswith("trace_"):
            continue
        name = f"cached_{onnx_path.stem}"
        found = [folder / f"{name}.csv" for folder in (COMMITTED, GENERATED)
                 if (folder / f"{name}.csv").exists()]
        paths.append(found[0] if found else write_trace(name, plan_buffers(onnx_path)))
    return paths


def available_traces() -> list[tuple[str, list[Buffer]]]:
    """(name, buffers) of every trace written so far, smallest first."""
    paths = sorted(COMMITTED.glob("*.csv")) + sorted(GENERATED.glob("*.csv"))
    found = [(path.stem, read_buffers_csv(path)) for path in paths]
    return sorted(found, key=lambda item: (len(item[1]), item[0]))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help=f"traces to make (default all: "
                        f"{', '.join(case_names())})")
    parser.add_argument("--cached", action="store_true",
                        help="only the traces of the models already in bench/models/")
    args = parser.parse_args(argv)
    if args.cached:
        for path in cached_traces():
            print(f"{path.stem}: {sum(1 for _ in path.open()) - 1} buffers -> {path}")
        return 0
    unknown = [n for n in args.names if n not in case_names()]
    if unknown:
        parser.error(f"unknown trace(s) {unknown}; known: {', '.join(case_names())}")
    for name in args.names or case_names():
        started = time.perf_counter()
        path = make_trace(name)
        rows = sum(1 for _ in path.open()) - 1
        print(f"{name}: {rows} buffers -> {path} ({time.perf_counter() - started:.0f} s)",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
