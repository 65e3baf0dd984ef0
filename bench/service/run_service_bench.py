"""Service load check: concurrent POST /plan (cached and new) against a real server on loopback.

    .venv/bin/python -m bench.service.run_service_bench [--workers 2] [--concurrent 50]

Starts `arenaplan serve` on 127.0.0.1 (a free port, a fresh SQLite file in a temporary folder),
then, all bounded in count and time:
1. seeds: plans a few requests so that they are stored;
2. mixed burst: `--concurrent` POST /plan at once (httpx, one connection each), ~70% repeats of
   stored plans and ~30% new requests (some of them duplicated, sent at the same time);
   every answer must be a valid plan (200, or 202 then polled to 200) with the expected id,
   every new id must be `done` in the store, and the solver must have run once per distinct new
   request (no lost jobs, no duplicate solves);
3. cached latency: `--cached-requests` POST /plan repeats and as many GET /plans/{id}, eight at a
   time, for p50/p99;
4. cached GET latency alone: `--get-requests` GET /plans/{id} of stored plans, eight in flight,
   from httpx (as a Python client fetches, gzip accepted) and from eight bare keep-alive
   HTTP/1.1 connections (the server's share: no client library in the way), asking for gzip and
   for identity; every body is checked against the plan's bytes.
Writes bench/service/results.json and results.md under `--label` (`after` by default), keeping
the other label's figures: `before` is this same bench run from a checkout of the commit before
a change (`cd OLD_CHECKOUT && python -m bench.service.run_service_bench --label before
--out-dir NEW_CHECKOUT/bench/service`, with this file copied there).
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import hashlib
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from planner.version import PLANNER_VERSION
from schemas.plan import Plan, PlanRequest, compute_plan_id
from tests.support.fixture_zoo import model_path
from tests.support.service import ServiceProcess, metric

OUT = Path(__file__).resolve().parent
MODELS = ("mlp_sgd", "cnn_bn_momentum")
REQUEST_TIMEOUT_S = 180.0
RUN_DEADLINE_S = 600.0
IN_FLIGHT = 8
LABELS = ("before", "after")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


class Case:
    def __init__(self, model: str, seed: int, kind: str):
        self.model, self.seed, self.kind = model, seed, kind
        self.data = model_path(model).read_bytes()
        self.request = PlanRequest(budgets={"cpu": 2**40}, time_limit_s=1, seed=seed)
        self.plan_id = compute_plan_id(hashlib.sha256(self.data).hexdigest(), self.request,
                                       PLANNER_VERSION)


async def post(client: httpx.AsyncClient, url: str, case: Case, wait: float) -> dict:
    started = time.perf_counter()
    try:
        response = await client.post(
            url + "/plan", params={"wait": wait},
            files={"model": ("model.onnx", case.data, "application/octet-stream"),
                   "request": (None, case.request.model_dump_json(), "application/json")})
    except httpx.HTTPError as exc:
        return {"kind": case.kind, "status": None, "error": repr(exc),
                "seconds": time.perf_counter() - started, "case": case}
    seconds = time.perf_counter() - started
    return {"kind": case.kind, "status": response.status_code, "seconds": seconds,
            "body": response.content, "case": case}


async def settle(client: httpx.AsyncClient, url: str, result: dict) -> dict:
    """A 202 is polled until the plan is there (bounded by REQUEST_TIMEOUT_S)."""
    deadline = time.monotonic() + REQUEST_TIMEOUT_S
    while result["status"] == 202 and time.monotonic() < deadline:
        await asyncio.sleep(0.5)
        response = await client.get(f"{url}/plans/{result['case'].plan_id}")
        result["status"], result["body"] = response.status_code, response.content
    return result


def check_plan(result: dict) -> str | None:
    if result["status"] != 200:
        return f"{result['kind']} {result['case'].model} seed {result['case'].seed}: " \
               f"HTTP {result['status']} {result.get('error') or result['body'][:200]!r}"
    plan = Plan.model_validate_json(result["body"])
    if plan.plan_id != result["case"].plan_id:
        return f"plan id {plan.plan_id} != expected {result['case'].plan_id}"
    return None


async def run_bench(url: str, concurrent: int, cached_requests: int, get_requests: int,
                    seed: int) -> dict:
    rng = random.Random(seed)
    limits = httpx.Limits(max_connections=concurrent, max_keepalive_connections=concurrent)
    timeout = httpx.Timeout(REQUEST_TIMEOUT_S)
    async with httpx.AsyncClient(limits=limits, timeout=timeout) as client:
        # 1. Seed stored plans.
        seeded = [Case(model, s, "cached") for model in MODELS for s in range(3)]
        seed_results = await asyncio.gather(*(post(client, url, c, 120) for c in seeded))
        seed_results = [await settle(client, url, r) for r in seed_results]
        errors = [e for e in map(check_plan, seed_results) if e]
        if errors:
            raise SystemExit(f"seeding failed: {errors}")
        solves_before = metric(url, "arenaplan_solves_started_total")

        # 2. The mixed burst: all requests sent at once.
        n_new = max(1, round(concurrent * 0.3))
        distinct_new = max(1, round(n_new * 0.7))
        new_cases = [Case(MODELS[i % len(MODELS)], 1000 + i, "new") for i in range(distinct_new)]
        burst = [rng.choice(seeded) for _ in range(concurrent - n_new)]
        burst += [new_cases[i % distinct_new] for i in range(n_new)]
        burst = [Case(c.model, c.seed, c.kind) for c in burst]
        rng.shuffle(burst)
        started = time.perf_counter()
        results = await asyncio.gather(*(post(client, url, c, 120) for c in burst))
        results = list(await asyncio.gather(*(settle(client, url, r) for r in results)))
        burst_seconds = time.perf_counter() - started
        errors = [e for e in map(check_plan, results) if e]
        solves = metric(url, "arenaplan_solves_started_total") - solves_before
        listed = (await client.get(url + "/plans", params={"limit": 1000})).json()["plans"]
        states = {p["plan_id"]: p["status"] for p in listed}
        lost = [c.plan_id for c in new_cases if states.get(c.plan_id) != "done"]

        # 3. Cached latency, eight requests in flight.
        gate = asyncio.Semaphore(IN_FLIGHT)
        cached_ids = [c.plan_id for c in seeded]

        async def cached_post(case: Case) -> dict:
            async with gate:
                return await post(client, url, Case(case.model, case.seed, "cached"), 0)

        async def cached_get(plan_id: str) -> tuple[int, float]:
            async with gate:
                t0 = time.perf_counter()
                response = await client.get(f"{url}/plans/{plan_id}")
                return response.status_code, time.perf_counter() - t0

        posts = await asyncio.gather(*(cached_post(rng.choice(seeded))
                                       for _ in range(cached_requests)))
        gets = await asyncio.gather(*(cached_get(rng.choice(cached_ids))
                                      for _ in range(cached_requests)))
        errors += [e for e in map(check_plan, posts) if e]
        errors += [f"GET HTTP {status}" for status, _ in gets if status != 200]

        # 4. Cached GET alone, eight in flight: httpx, then bare connections.
        expected = {c.plan_id: (await client.get(f"{url}/plans/{c.plan_id}",
                                                 headers={"Accept-Encoding": "identity"})).content
                    for c in seeded}
        paths = [f"/plans/{rng.choice(cached_ids)}" for _ in range(get_requests)]

        async def httpx_get(path: str) -> float:
            async with gate:
                t0 = time.perf_counter()
                response = await client.get(url + path)
                seconds = time.perf_counter() - t0
                if response.content != expected[path.rsplit("/", 1)[1]]:
                    errors.append(f"GET {path}: HTTP {response.status_code}, not the plan")
                return seconds

        get_latency = {"httpx": list(await asyncio.gather(*(httpx_get(p) for p in paths)))}
        for accept in ("gzip", "identity"):
            get_latency[f"raw_{accept}"] = await raw_gets(url, paths, accept, expected, errors)

    return {
        "burst": {
            "requests": concurrent, "cached": concurrent - n_new, "new": n_new,
            "distinct_new": distinct_new, "seconds": burst_seconds,
            "errors": len(errors), "lost_jobs": len(lost), "solves": solves,
            "cached_latency": summary([r["seconds"] for r in results if r["kind"] == "cached"]),
            "new_latency": summary([r["seconds"] for r in results if r["kind"] == "new"]),
        },
        "cached_post": summary([r["seconds"] for r in posts]),
        "cached_get": summary([s for _, s in gets]),
        "get_alone": {name: summary(values) for name, values in get_latency.items()},
        "error_messages": errors[:20], "lost": lost,
    }


def summary(values: list[float]) -> dict:
    return {"n": len(values), "p50_ms": 1000 * percentile(values, 50),
            "p99_ms": 1000 * percentile(values, 99), "max_ms": 1000 * max(values),
            "mean_ms": 1000 * statistics.fmean(values)}


async def raw_gets(url: str, paths: list[str], accept: str, expected: dict[str, bytes],
                   errors: list[str]) -> list[float]:
    """GET each path over IN_FLIGHT bare keep-alive HTTP/1.1 connections (Content-Length
    framed, as the service answers plans); the latency of each, every body checked."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    queue = iter(paths)
    seconds: list[float] = []

    async def connection() -> None:
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            for path in queue:
                t0 = time.perf_counter()
                writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}\r\n"
                             f"Accept-Encoding: {accept}\r\n\r\n".encode())
                head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
                fields = {k.lower(): v.strip() for k, _, v in
                          (line.partition(":") for line in head[1:] if line)}
                data = await reader.readexactly(int(fields.get("content-length", 0)))
                seconds.append(time.perf_counter() - t0)
                if fields.get("content-encoding") == "gzip":
                    data = gzip.decompress(data)
                if data != expected[path.rsplit("/", 1)[1]]:
                    errors.append(f"raw GET {path} ({accept}): {head[0]}, not the plan")
        finally:
            writer.close()

    await asyncio.gather(*(connection() for _ in range(IN_FLIGHT)))
    return seconds


GET_CLIENTS = (("httpx", "httpx (gzip accepted)"), ("raw_gzip", "bare connections, gzip"),
               ("raw_identity", "bare connections, identity"))


def write_tables(out: Path, runs: dict[str, dict]) -> None:
    """results.json: every label's report; results.md: the latest run in full, then cached GET
    before and after."""
    (out / "results.json").write_text(json.dumps({"runs": runs}, indent=1) + "\n")
    label = "after" if "after" in runs else next(iter(runs))
    report = runs[label]
    burst = report["result"]["burst"]
    rows = [
        ("burst: cached POST /plan", burst["cached_latency"]),
        ("burst: new POST /plan (solved, wait)", burst["new_latency"]),
        ("cached POST /plan (8 in flight)", report["result"]["cached_post"]),
        ("cached GET /plans/{id} (8 in flight)", report["result"]["cached_get"]),
    ]
    rows += [(f"cached GET alone, {name} (8 in flight)", report["result"]["get_alone"][key])
             for key, name in GET_CLIENTS]
    lines = [
        f"Service load check ({label}, {report.get('commit', '?')}): {report['machine']}, "
        f"{report['workers']} solver process(es), SQLite, loopback; models "
        f"{', '.join(MODELS)} (time_limit_s 1).",
        "",
        f"Mixed burst: {burst['requests']} concurrent POST /plan ({burst['cached']} cached, "
        f"{burst['new']} new of which {burst['distinct_new']} distinct) in "
        f"{burst['seconds']:.1f} s: **{burst['errors']} errors, {burst['lost_jobs']} lost "
        f"jobs**, {burst['solves']:g} solves for {burst['distinct_new']} distinct new requests.",
        "",
        "| requests | n | p50 ms | p99 ms | max ms | mean ms |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, s in rows:
        lines.append(f"| {name} | {s['n']} | {s['p50_ms']:.1f} | {s['p99_ms']:.1f} | "
                     f"{s['max_ms']:.1f} | {s['mean_ms']:.1f} |")
    compared = [name for name in LABELS if name in runs]
    if len(compared) > 1:
        lines += [
            "",
            "Cached GET /plans/{id}, 8 in flight, before and after serving stored plans as bytes "
            "encoded once (issue 15, item 5; target: p50 <= 10 ms):",
            "",
            "| client | " + " | ".join(f"{name} p50 ms | {name} p99 ms" for name in compared)
            + " |",
            "|---|" + "---:|---:|" * len(compared),
        ]
        for key, name in GET_CLIENTS:
            cells = []
            for run in compared:
                s = runs[run]["result"]["get_alone"][key]
                cells += [f"{s['p50_ms']:.1f}", f"{s['p99_ms']:.1f}"]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines += ["", "Commits: " + ", ".join(f"{name} {runs[name].get('commit', '?')}"
                                              for name in compared) + "."]
    (out / "results.md").write_text("\n".join(lines) + "\n")


def current_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True, cwd=Path.cwd()).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrent", type=int, default=50)
    parser.add_argument("--cached-requests", type=int, default=200)
    parser.add_argument("--get-requests", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--label", choices=LABELS, default="after")
    parser.add_argument("--out-dir", type=Path, default=OUT)
    args = parser.parse_args()
    if not 1 <= args.concurrent <= 200 or not 1 <= args.cached_requests <= 2000 \
            or not 1 <= args.get_requests <= 20000:
        parser.error("--concurrent must be 1..200, --cached-requests 1..2000 and "
                     "--get-requests 1..20000")
    with tempfile.TemporaryDirectory(prefix="arenaplan-bench-") as tmp:
        service = ServiceProcess(Path(tmp), workers=args.workers)
        service.start()
        try:
            result = asyncio.run(asyncio.wait_for(
                run_bench(service.url, args.concurrent, args.cached_requests,
                          args.get_requests, args.seed),
                RUN_DEADLINE_S))
        finally:
            service.stop()
    machine = f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, " \
              f"Python {platform.python_version()}"
    report = {"machine": machine, "workers": args.workers, "planner_version": PLANNER_VERSION,
              "commit": current_commit(), "concurrent": args.concurrent, "result": result}
    previous = args.out_dir / "results.json"
    runs = json.loads(previous.read_text()).get("runs", {}) if previous.exists() else {}
    runs[args.label] = report
    write_tables(args.out_dir, runs)
    print((args.out_dir / "results.md").read_text())
    burst = result["burst"]
    ok = burst["errors"] == 0 and burst["lost_jobs"] == 0 and not result["error_messages"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
