"""Time limits kept: whole `arenaplan plan` requests and `min-budget` queries on the shapes that
used to overrun them.

Issue 14: every request returns within `time_limit_s` + 5% (+1 s for limits under 20 s), with
the best plan found so far, whatever the number of devices and ops. The cases that broke it:

- a 20,000-op chain (node-link JSON, tests.support.chains; 4.4 s at a 2 s limit once), and
  the same chain at a budget the planner refuses (9.4 s at 2 s and 11.7 s at 10 s once);
- 60 small device budgets on mlp_sgd (a supplied profile: cpu plus cuda:0..58, each device
  twice as fast as the CPU, copies between every pair; 17 s at a 2 s limit once);
- costs of ~1e13 s (a traceback once: CP-SAT's integer range);
- bench-scale ONNX graphs at short limits (profile, order, remat, layout and validation of
  4,000+ ops in 10 s), from warm caches (the profile cache, and the rewrites' cache of
  planner.ir.rewrite_cache, filled by an untimed load first: what a second request for the
  model finds), and GPT-2-small also from empty ones (`-cold`: a fresh ARENAPLAN_CACHE_DIR,
  the first request for the model on a machine; ops not measured in the profile's share of
  the time get estimates);
- UNet-small just below the least peak the remat search reaches, at 2 s;
- `arenaplan min-budget` on GPT-2-small at 10 s (29 s once, and 60 s from empty caches: its
  profile had no time limit) and on smaller graphs.

Each request runs in-process through the CLI (`arenaplan.cli.main`: loading, profiling,
planning, validation, writing the plan) and is timed from the call to its return.

    .venv/bin/python -m bench.remat.run_limits_bench [--cases a,b]

writes bench/remat/limits.json and limits.md (the cases run replace their rows; the others
stay).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import random
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from arenaplan.cli import main as cli
from bench.remat.run_budget_bench import model_file
from planner.ir.graph import load_graph
from planner.profile import QUICK_POLICY, profile_graph
from planner.profile.devices import Device
from planner.profile.estimate import matmul_seconds
from planner.profile.host_speed import REFERENCE_N
from schemas.profile import CopyFit
from schemas.units import format_bytes
from tests.support.chains import chain_json
from tests.support.fixture_zoo import model_path

HERE = Path(__file__).parent
CHAIN_LAYERS = 10_000  # forward and backward: 20,002 ops
CHAIN_BUDGET = 20_000  # bytes: its keep-everything peak is 44,703 B
# Above its op-footprint bound (24 B), below what the planner meets (11-22 KB): a refusal.
CHAIN_REFUSED_BUDGET = 1_000
DEVICES = 60


def allowed_s(limit: float) -> float:
    """What issue 14 allows a request with `limit`."""
    return limit * 1.05 + (1.0 if limit < 20 else 0.0)


def chain_case(tmp: Path, scale: float = 1.0, budget: int = CHAIN_BUDGET) -> list[str]:
    data = chain_json(random.Random(0), CHAIN_LAYERS)
    for node in data["nodes"]:
        if "cost_cpu" in node:
            node["cost_cpu"] *= scale
    path = tmp / f"chain-{scale:g}.json"
    path.write_text(json.dumps(data))
    return ["--graph-json", str(path), "--budget", f"cpu={budget}", "--alignment", "1"]


def huge_costs_case(tmp: Path) -> list[str]:
    return chain_case(tmp, scale=1e13)


def refused_chain_case(tmp: Path) -> list[str]:
    return chain_case(tmp, budget=CHAIN_REFUSED_BUDGET)


def many_devices_case(tmp: Path) -> list[str]:
    model = model_path("mlp_sgd")
    graph = load_graph(model, optimization="disable")
    profile = profile_graph(graph, ["cpu"], policy=QUICK_POLICY)
    devices = [f"cuda:{k}" for k in range(DEVICES - 1)]
    ops = []
    for op in profile.ops:
        cpu = op.costs["cpu"]
        faster = cpu.model_copy(update={"median_seconds": cpu.median_seconds * 0.5})
        ops.append(op.model_copy(update={"costs": {"cpu": cpu, **dict.fromkeys(devices,
                                                                                faster)}}))
    copies = [CopyFit(src=a, dst=b, latency_seconds=1e-5, bytes_per_second=1e10,
                      method="synthetic")
              for a in ["cpu", *devices] for b in ["cpu", *devices] if a != b]
    path = tmp / "mlp_sgd_60dev.json"
    path.write_text(profile.model_copy(update={"devices": ["cpu", *devices], "ops": ops,
                                               "copies": copies}).model_dump_json())
    args = [str(model), "--graph-optimization", "disable", "--profile", str(path),
            "--budget", "cpu=70KiB"]
    for device in devices:
        args += ["--budget", f"{device}=4KiB"]
    return args


def model_case(name: str, budget: str | None = None) -> Callable[[Path], list[str]]:
    """The model's file, and a `--budget` when given (none: a min-budget query)."""
    def case(tmp: Path) -> list[str]:
        return [str(model_file(name)), *(["--budget", f"cpu={budget}"] if budget else [])]
    return case


MIN_BUDGET = "min-budget "  # a case name starting so runs `arenaplan min-budget`, else `plan`

# name -> (time limit in seconds, arguments beside the limit and the output)
CASES: dict[str, tuple[float, Callable[[Path], list[str]]]] = {
    "chain20k@2s": (2.0, chain_case),
    "chain20k@10s": (10.0, chain_case),
    "chain20k-1e13-costs@2s": (2.0, huge_costs_case),
    "chain20k-refused@2s": (2.0, refused_chain_case),
    "chain20k-refused@10s": (10.0, refused_chain_case),
    "mlp_sgd-60-devices@2s": (2.0, many_devices_case),
    # Budgets of persistent + 50% of the activations (bench/remat/budgets.md).
    "resnet18_narrow@10s": (10.0, model_case("resnet18_narrow", "2.6MiB")),
    "mobilenet_v2_momentum@10s": (10.0, model_case("mobilenet_v2_momentum", "48.1MiB")),
    "gpt2_small_adam@10s": (10.0, model_case("gpt2_small_adam", "1849.3MiB")),
    "gpt2_small_adam@5s": (5.0, model_case("gpt2_small_adam", "1849.3MiB")),
    "gpt2_small_adam@10s-cold": (10.0, model_case("gpt2_small_adam", "1849.3MiB")),
    "gpt2_small_adam@5s-cold": (5.0, model_case("gpt2_small_adam", "1849.3MiB")),
    # Just below the least peak the search reaches (477,184 B): 7.1 s at 2.3 s once (CP-SAT's
    # models built after their share was spent), a refusal naming 478,272 B.
    "unet_small-tight@2s": (2.0, model_case("unet_small", "466KiB")),
    f"{MIN_BUDGET}unet_small@10s": (10.0, model_case("unet_small")),
    f"{MIN_BUDGET}mobilenet_v2_momentum@10s": (10.0, model_case("mobilenet_v2_momentum")),
    f"{MIN_BUDGET}gpt2_small_adam@10s": (10.0, model_case("gpt2_small_adam")),
    f"{MIN_BUDGET}gpt2_small_adam@10s-cold": (10.0, model_case("gpt2_small_adam")),
}
COLD = "-cold"  # a case run with empty caches (see the module doc)


@contextlib.contextmanager
def caches_for(name: str, args: list[str], tmp: Path) -> Iterator[None]:
    """Empty caches for a cold case; for the other ONNX cases, the rewrites' cache filled with
    the model's rewrite first (untimed)."""
    if not name.endswith(COLD):
        if args[0].endswith(".onnx"):
            load_graph(args[0], optimization="extended")
        yield
        return
    before = os.environ.get("ARENAPLAN_CACHE_DIR")
    os.environ["ARENAPLAN_CACHE_DIR"] = tempfile.mkdtemp(prefix="cold-cache-", dir=tmp)
    try:
        yield
    finally:
        if before is None:
            del os.environ["ARENAPLAN_CACHE_DIR"]
        else:
            os.environ["ARENAPLAN_CACHE_DIR"] = before


def python_seconds(n: int = 1_000_000) -> float:
    """The interpreter's speed: the planner is mostly Python, and on this host it drifts apart
    from the reference kernel's (the same commit ran the 20,000-op chain at 2 s in 2.8 s one day
    and 8.8 s two days later, the MatMul at 0.5 ms both times)."""
    started = time.perf_counter()
    total = 0
    for i in range(n):
        total += i * i % 7
    return time.perf_counter() - started


def run_case(name: str, tmp: Path) -> dict:
    limit, arguments = CASES[name]
    args = arguments(tmp)
    out = tmp / f"{name}.plan.json"
    said = io.StringIO()
    with caches_for(name, args, tmp):
        load = os.getloadavg()[0]
        host = matmul_seconds(Device("cpu"), 1, REFERENCE_N)
        interpreter = python_seconds()
        started, cpu = time.perf_counter(), time.process_time()
        command = "min-budget" if name.startswith(MIN_BUDGET) else "plan"
        with contextlib.redirect_stderr(said), contextlib.redirect_stdout(io.StringIO()):
            code = cli([command, *args, "--time-limit", f"{limit:g}", "-o", str(out)])
        wall = time.perf_counter() - started
    sys.stderr.write(said.getvalue())
    row = {"case": name, "time_limit_s": limit, "allowed_s": round(allowed_s(limit), 2),
           "wall_s": round(wall, 2), "cpu_s": round(time.process_time() - cpu, 2),
           "exit": code, "load": round(load, 1), "host_ms": round(host * 1e3, 2),
           "python_ms": round(interpreter * 1e3)}
    if code == 0:
        plan = json.loads(out.read_text())
        remat = [s for s in plan["solvers"] if s["phase"] == "remat"]
        row["remat"] = f"{remat[0]['status']} ({remat[0]['method']})" if remat else "-"
        if command == "min-budget":
            row["remat"] = (f"achieved {format_bytes(plan['devices'][0]['arena_bytes'])}: "
                            f"{row['remat']}")
    else:  # the refusal, as the CLI's last line says it
        lines = said.getvalue().strip().splitlines()
        row["remat"] = lines[-1][:160] if lines else "-"
    return row


def markdown(rows: list[dict]) -> str:
    lines = [
        "# Time limits kept",
        "",
        f"{platform.machine()}, {os.cpu_count()} cores (shared). Whole `arenaplan plan` "
        "requests and `arenaplan min-budget` queries (the achieved budget, and the remat phase "
        "of the plan made for it) in-process (load, profile, order, remat, layout, validation, "
        "write), timed "
        "from the call to its return. Allowed: the limit + 5%, + 1 s under 20 s (issue 14). "
        "Exit 0: a plan was written; 2: a clear refusal (budget infeasible). CPU: the "
        "process's CPU seconds over the request, all threads (on a busy machine the wall time "
        "exceeds it by the time other processes took). Load: 1-minute load average at the "
        "start (2 cores). ONNX cases start from warm caches (the profile cache and the "
        "rewrites' cache: what a second request for the model finds); `-cold` cases from "
        "empty ones (the first request for the model on a machine). The first case run also "
        "pays the planner's imports (about 1 s on this machine). *host*: the reference kernel "
        "of planner.profile.host_speed (a 256^3 float MatMul, one thread) timed just before "
        "the case: this host runs it in about 0.5 ms for minutes, then about 0.9-1.4 ms for a "
        "while. *python*: a loop of a million integer operations in the interpreter, timed "
        "then too (most of the planner is Python, whose speed here drifts on its own).",
        "",
        "| case | limit s | allowed s | wall s | cpu s | exit | remat (or the refusal) | load "
        "| host ms | python ms |",
        "|---|---:|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    for r in rows:
        mark = "" if r["wall_s"] <= r["allowed_s"] else " ✗"
        cpu = f"{r['cpu_s']:.2f}" if "cpu_s" in r else "-"
        lines.append(f"| {r['case']} | {r['time_limit_s']:g} | {r['allowed_s']:.2f} | "
                     f"{r['wall_s']:.2f}{mark} | {cpu} | {r['exit']} | {r.get('remat', '-')} | "
                     f"{r['load']} | {r.get('host_ms', '-')} | {r.get('python_ms', '-')} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(CASES),
                        help=f"comma-separated, of: {', '.join(CASES)}")
    args = parser.parse_args()
    names = [n for n in args.cases.split(",") if n]
    unknown = [n for n in names if n not in CASES]
    if unknown:
        parser.error(f"unknown case(s) {unknown}; choose from {list(CASES)}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            row = run_case(name, Path(tmp))
            print(json.dumps(row), flush=True)
            rows.append(row)
    (HERE / "limits.json").write_text(json.dumps({"rows": merged(rows)}, indent=1) + "\n")
    (HERE / "limits.md").write_text(markdown(merged(rows)))


def merged(rows: list[dict]) -> list[dict]:
    """`rows` in place of the same cases' rows of limits.json, in CASES' order (a run of some
    cases keeps the others' figures)."""
    path = HERE / "limits.json"
    kept = {r["case"]: r for r in json.loads(path.read_text())["rows"]} if path.exists() else {}
    kept.update({r["case"]: r for r in rows})
    return [kept[name] for name in CASES if name in kept]


if __name__ == "__main__":
    main()
