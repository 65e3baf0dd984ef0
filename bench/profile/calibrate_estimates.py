"""Calibration of the roofline fallback (planner.profile.estimate): measure every op of the
fixtures and bench models, fit the constants, and compare estimated with measured times.

    .venv/bin/python -m bench.profile.calibrate_estimates [--models mlp_sgd ...]

Each model is loaded with ONNX Runtime's extended rewrite (the CLI's default) and profiled on the
CPU with one thread and the quick policy (cached in calibration-cache.sqlite beside the user's
profile cache, so a rerun only fits). Ops whose signature was measured once for several share
one measurement and count once. The fit (`fit`) is the one the estimate module's docstring
describes; it prints the constants to paste there, and writes bench/profile/estimates.json and
estimates.md: the ratio estimated/measured for the bare roofline and the calibrated estimate,
per model and per class, and for constants fitted on the fixtures alone applied to the bench
models.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from planner.ir.graph import Graph, Op, load_graph
from planner.profile import QUICK_POLICY, profile_graph
from planner.profile import estimate as est
from planner.profile.cache import ProfileCache, default_cache_path
from planner.profile.devices import Device
from schemas.profile import Roofline
from tests.support.fixture_zoo import FIXTURE_DIR

OUT = Path(__file__).resolve().parent
BENCH_DIR = OUT.parent / "models"
FIXTURES = ("mlp_sgd", "cnn_bn_momentum", "unet_small", "resnet_cifar", "gpt2_tiny_adam",
            "resnet18_narrow")
BENCH = ("gpt2_small_adam", "bert_small_adam", "vgg11_sgd", "mobilenet_v2_momentum",
         "resnet18_momentum", "unet_adam")
BIG_S = 1e-5  # roofline time from which the launch floor is negligible
TINY_S = 5e-8  # roofline time under which an op costs its launch
MIN_SAMPLES = 5
WIDE_BROADCAST = 4096  # elements from which a narrow broadcast's per-element cost is read


@dataclass(frozen=True)
class Sample:
    model: str
    graph: Graph
    op: Op
    seconds: float
    roofline_s: float


def measure(models: Sequence[str], roof: Roofline) -> list[Sample]:
    samples: list[Sample] = []
    with ProfileCache(default_cache_path().with_name("calibration-cache.sqlite")) as cache:
        for name in models:
            path = (FIXTURE_DIR if name in FIXTURES else BENCH_DIR) / f"{name}.onnx"
            graph = load_graph(path, optimization="extended")
            profile = profile_graph(graph, cache=cache, policy=QUICK_POLICY)
            seen: set[tuple[str, int, int, float]] = set()
            for op, entry in zip(graph.ops, profile.ops, strict=True):
                cost = entry.costs.get("cpu")
                if cost is None or cost.source != "measured" or cost.median_seconds <= 0:
                    continue
                key = (op.op_type, est.op_flops(graph, op), est.op_bytes(graph, op),
                       cost.median_seconds)
                if key not in seen:  # one sample per measurement, not per deduplicated op
                    seen.add(key)
                    samples.append(Sample(name, graph, op, cost.median_seconds,
                                          est.roofline_seconds(graph, op, roof)))
            print(f"{name}: {len(graph.ops)} ops, {len(seen)} distinct measurements", flush=True)
    return samples


def _numel(s: Sample) -> int:
    return math.prod(s.graph.tensors[s.op.output_ids[0]].shape)


@dataclass(frozen=True)
class Constants:
    slowdown: dict[str, float]
    default: float
    floor_s: float
    narrow_s: float

    def apply(self) -> None:
        est.SLOWDOWN, est.DEFAULT_SLOWDOWN = self.slowdown, self.default
        est.LAUNCH_FLOOR_S, est.NARROW_BROADCAST_S = self.floor_s, self.narrow_s


def fit(samples: Sequence[Sample]) -> Constants:
    narrow = [s for s in samples if est.narrow_broadcast(s.graph, s.op)]
    rest = [s for s in samples if not est.narrow_broadcast(s.graph, s.op)]
    big = [s for s in rest if s.roofline_s >= BIG_S]
    by_class: dict[str, list[float]] = defaultdict(list)
    for s in big:
        by_class[est.calibration_key(s.op)].append(s.seconds / s.roofline_s)
    wide = [s.seconds / _numel(s) for s in narrow if _numel(s) >= WIDE_BROADCAST]
    return Constants(
        {k: round(statistics.median(v), 2) for k, v in sorted(by_class.items())
         if len(v) >= MIN_SAMPLES},
        round(statistics.median(s.seconds / s.roofline_s for s in big), 2),
        statistics.median(s.seconds for s in rest if s.roofline_s < TINY_S),
        statistics.median(wide) if wide else est.NARROW_BROADCAST_S,
    )


def ratios(samples: Sequence[Sample], estimate: Callable[[Sample], float]) -> dict[str, float]:
    r = [estimate(s) / s.seconds for s in samples]
    deciles = statistics.quantiles(r, n=10) if len(r) > 1 else [r[0]] * 9
    return {"n": len(r), "median": statistics.median(r), "p10": deciles[0], "p90": deciles[-1],
            "summed": sum(map(estimate, samples)) / sum(s.seconds for s in samples)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", nargs="+", default=[*FIXTURES, *BENCH])
    args = parser.parse_args()
    roof = est.measure_roofline(Device("cpu"), 1)
    samples = measure(args.models, roof)

    def bare(s: Sample) -> float:
        return s.roofline_s

    def calibrated(s: Sample) -> float:
        return est.estimate_seconds(s.graph, s.op, roof)

    shipped = ratios(samples, calibrated)
    fitted = fit(samples)
    print(json.dumps(fitted.__dict__, indent=1))
    rows: dict[str, dict] = {"all": {"bare": ratios(samples, bare), "calibrated": shipped}}
    for name in args.models:
        mine = [s for s in samples if s.model == name]
        rows[name] = {"bare": ratios(mine, bare), "calibrated": ratios(mine, calibrated)}
    classes: dict[str, list[Sample]] = defaultdict(list)
    for s in samples:
        classes[est.calibration_key(s.op)].append(s)
    per_class = {k: {"bare": ratios(v, bare), "calibrated": ratios(v, calibrated)}
                 for k, v in sorted(classes.items(), key=lambda kv: -len(kv[1]))
                 if len(v) >= 8}
    held_out = [s for s in samples if s.model not in FIXTURES]
    if held_out and len(held_out) < len(samples):
        fit([s for s in samples if s.model in FIXTURES]).apply()
        rows["bench, fitted on the fixtures"] = {"bare": ratios(held_out, bare),
                                                 "calibrated": ratios(held_out, calibrated)}
    result = {"roofline": roof.model_dump(), "fitted": fitted.__dict__, "models": rows,
              "classes": per_class}
    (OUT / "estimates.json").write_text(json.dumps(result, indent=1) + "\n")
    (OUT / "estimates.md").write_text(_markdown(result))


def _markdown(result: dict) -> str:
    roof = result["roofline"]
    lines = [
        "# Roofline fallback: estimated / measured (CPU, one thread)", "",
        f"Roofline {roof['peak_flops'] / 1e9:.0f} GFLOP/s, {roof['bytes_per_second'] / 1e9:.0f} "
        "GB/s. One row per distinct measurement (quick policy, extended rewrite). `summed`: the "
        "estimates' sum over the measured times' sum.", "",
        "| set | n | bare median | p10 | p90 | summed | calibrated median | p10 | p90 | summed |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for table in ("models", "classes"):
        if table == "classes":
            lines += ["", "| class | n | bare median | p10 | p90 | summed | calibrated median | "
                      "p10 | p90 | summed |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for name, row in result[table].items():
            b, c = row["bare"], row["calibrated"]
            lines.append(f"| {name} | {b['n']} | " + " | ".join(
                f"{r[k]:.2f}" for r in (b, c) for k in ("median", "p10", "p90", "summed")) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
