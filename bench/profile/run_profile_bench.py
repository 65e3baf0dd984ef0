"""Profiling benchmark: wall time of `profile_graph` per fixture with a cold and a warm cache,
and how the per-op costs add up against a whole-graph ONNX Runtime run.

    .venv/bin/python -m bench.profile.run_profile_bench [--fixtures mlp_sgd ...] [--threads 1]

Writes bench/profile/results.json and bench/profile/results.md (a markdown table). The cold run
starts from an empty cache file; the warm run profiles the same model again with that cache.
The whole-graph reference uses the same session settings as the per-op sessions (optimizations
off, sequential, same intra-op threads); it is reported two ways: inputs/outputs pre-bound with
IOBinding (the fastest run of a ~1 s burst: the least disturbed by other processes) and plain
`session.run` with numpy feeds (median), which adds Python-side conversion of every input and
output. With one thread the whole graph's CPU time of the calling thread is reported as well:
unlike wall time it does not grow when other processes preempt the run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

from planner.ir.graph import load_graph
from planner.profile import profile_graph
from planner.profile.devices import session_options
from planner.profile.machine import cpu_model
from tests.support.fixture_zoo import FIXTURE_DIR

OUT = Path(__file__).resolve().parent
DEFAULT_FIXTURES = ("mlp_sgd", "cnn_bn_momentum", "unet_small", "resnet_cifar", "gpt2_tiny_adam",
                    "resnet18_narrow")


def whole_graph(path: Path, inputs: dict, threads: int, budget_s: float = 1.0
                ) -> dict[str, float]:
    session = ort.InferenceSession(str(path), session_options(threads),
                                   providers=["CPUExecutionProvider"])
    feeds = {i.name: inputs[i.name] for i in session.get_inputs()}
    binding = session.io_binding()
    for name, array in feeds.items():
        binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(array))
    for out, array in zip(session.get_outputs(), session.run(None, feeds), strict=True):
        binding.bind_ortvalue_output(out.name,
                                     ort.OrtValue.ortvalue_from_numpy(np.empty_like(array)))

    def burst(run, clock=time.perf_counter_ns) -> list[float]:
        for _ in range(3):
            run()
        times, deadline = [], time.perf_counter() + budget_s
        while time.perf_counter() < deadline or len(times) < 10:
            start = clock()
            run()
            times.append((clock() - start) * 1e-9)
        return times

    bound = burst(lambda: session.run_with_iobinding(binding))
    plain = burst(lambda: session.run(None, feeds))
    result = {"iobinding_min_s": min(bound), "iobinding_median_s": statistics.median(bound),
              "run_median_s": statistics.median(plain)}
    if threads == 1:  # ORT runs the graph on the calling thread: its CPU time ignores preemption
        cpu = burst(lambda: session.run_with_iobinding(binding), clock=time.thread_time_ns)
        result["iobinding_thread_cpu_median_s"] = statistics.median(cpu)
    return result


def bench_fixture(name: str, threads: int) -> dict:
    path = FIXTURE_DIR / f"{name}.onnx"
    inputs = dict(np.load(FIXTURE_DIR / f"{name}.inputs.npz"))
    graph = load_graph(path)
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "profile-cache.sqlite"
        start = time.perf_counter()
        cold = profile_graph(graph, ["cpu"], threads=threads, inputs=inputs, cache=cache)
        cold_s = time.perf_counter() - start
        start = time.perf_counter()
        warm = profile_graph(graph, ["cpu"], threads=threads, inputs=inputs, cache=cache)
        warm_s = time.perf_counter() - start
    whole = whole_graph(path, inputs, threads)
    total = sum(o.costs["cpu"].median_seconds for o in cold.ops if "cpu" in o.costs)
    return {
        "fixture": name,
        "ops": len(graph.ops),
        "cold_seconds": round(cold_s, 3),
        "warm_seconds": round(warm_s, 3),
        "cold_cache": cold.cache.model_dump(exclude={"path"}),
        "warm_cache": warm.cache.model_dump(exclude={"path"}),
        "unsupported_ops": sum(1 for o in cold.ops if o.unsupported),
        "sum_op_medians_s": total,
        "whole_graph": whole,
        "ratio_vs_iobinding_min": total / whole["iobinding_min_s"],
        "ratio_vs_iobinding_thread_cpu": (total / whole["iobinding_thread_cpu_median_s"]
                                          if "iobinding_thread_cpu_median_s" in whole else None),
        "ratio_vs_run_median": total / whole["run_median_s"],
    }


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{1e3 * seconds:.3f}"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def markdown(results: list[dict], meta: dict) -> str:
    lines = [
        "# Profiling benchmark (CPU)",
        "",
        f"Machine: {meta['cpu_model']}, {meta['cores']} cores (shared), onnxruntime "
        f"{meta['onnxruntime']}, threads={meta['threads']}, load average at start "
        f"{meta['loadavg_start']}.",
        "",
        "| fixture | ops | cold (s) | warm (s) | cold measured / dedup | warm hits | "
        "sum of op medians (ms) | whole graph IOBinding min (ms) | ratio | "
        "whole graph IOBinding thread-CPU median (ms) | ratio | "
        "whole graph session.run median (ms) | ratio |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        w = r["whole_graph"]
        lines.append(
            f"| {r['fixture']} | {r['ops']} | {r['cold_seconds']:.2f} | {r['warm_seconds']:.2f} "
            f"| {r['cold_cache']['misses']} / {r['cold_cache']['deduplicated']} "
            f"| {r['warm_cache']['hits']}/{r['ops']} "
            f"| {1e3 * r['sum_op_medians_s']:.3f} | {1e3 * w['iobinding_min_s']:.3f} "
            f"| {r['ratio_vs_iobinding_min']:.2f} "
            f"| {_ms(w.get('iobinding_thread_cpu_median_s'))} "
            f"| {_ratio(r['ratio_vs_iobinding_thread_cpu'])} | {1e3 * w['run_median_s']:.3f} "
            f"| {r['ratio_vs_run_median']:.2f} |"
        )
    lines += [
        "",
        "cold: empty cache (captures inputs, measures each distinct op once); warm: same cache "
        "again. ratio = sum of per-op medians / whole-graph time. Whole-graph wall times of "
        "tens of ms are inflated when other processes share the cores (see the load average); "
        "the thread-CPU time (threads=1: ONNX Runtime runs the graph on the calling thread) is "
        "not.",
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fixtures", nargs="*", default=list(DEFAULT_FIXTURES))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    meta = {
        "cpu_model": cpu_model(), "cores": os.cpu_count(), "onnxruntime": ort.__version__,
        "threads": args.threads, "platform": platform.platform(),
        "loadavg_start": [round(x, 2) for x in os.getloadavg()],
    }
    results = []
    for name in args.fixtures:
        if not (FIXTURE_DIR / f"{name}.onnx").exists():
            print(f"skip {name}: no fixture", file=sys.stderr)
            continue
        result = bench_fixture(name, args.threads)
        print(json.dumps(result), file=sys.stderr)
        results.append(result)
    meta["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(
        json.dumps({"meta": meta, "results": results}, indent=2) + "\n")
    (args.out / "results.md").write_text(markdown(results, meta))
    print(markdown(results, meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())
