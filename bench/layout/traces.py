"""Buffer traces of real training plans, written as layout CSV for `arenaplan layout --csv`.

    .venv/bin/python -m bench.layout.traces [NAME ...] [--list]

A trace is the arena instance of a real plan: the keep-everything plan (one cpu budget large
enough for everything) of a bench-scale training step, with shared storage as one buffer (only
storage owners are laid out, over the union of their buffers' ranges: planner.plan.live), raw
byte sizes and no alignment column (the format's convention: alignment 1). Persistent storages
(parameters, optimizer state) are plain buffers live over the whole step. The models are
exported on first use (bench.layout.trace_models, needs torch; minutes each) into bench/models/,
the traces written to bench/models/traces/NAME.csv; neither is committed (tens to hundreds of
KB each), so `run_layout_bench` measures the traces that are there.
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

TRACES = Path(__file__).resolve().parents[1] / "models" / "traces"
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
    """bench/models/traces/NAME.csv, exporting and planning the model first if missing."""
    from bench.layout.trace_models import EXPORT_TOLERANCE, TraceCase, fixture
    from bench.scale_models import export_cached

    path = TRACES / f"{name}.csv"
    if path.exists():
        return path
    model, _, batch = name.rpartition("_b")
    case = TraceCase(model, int(batch))
    onnx_path = export_cached(fixture(case), EXPORT_TOLERANCE)
    write_trace_csv(path, plan_buffers(onnx_path))
    return path


def available_traces(limit: int | None = None) -> list[tuple[str, list[Buffer]]]:
    """(name, buffers) of every trace written so far, at most ``limit`` buffers, by size."""
    out = []
    for path in sorted(TRACES.glob("*.csv")):
        buffers = read_buffers_csv(path)
        if limit is None or len(buffers) <= limit:
            out.append((path.stem, buffers))
    return sorted(out, key=lambda item: len(item[1]))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help=f"traces to make (default all: "
                        f"{', '.join(case_names())})")
    args = parser.parse_args(argv)
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
