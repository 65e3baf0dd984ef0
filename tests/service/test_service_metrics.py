"""/metrics through prometheus_client: the series names, types and labels the service has
always shown (scrapers and dashboards depend on them), gauges read at scrape time, and none of
the library's extra series."""

from __future__ import annotations

import asyncio

from service.metrics import RequestMetricsMiddleware, ScrapedGauge, ServiceMetrics

NAMES_AND_TYPES = [
    ("arenaplan_http_requests_total", "counter"),
    ("arenaplan_http_request_duration_seconds", "histogram"),
    ("arenaplan_plan_submissions_total", "counter"),
    ("arenaplan_solves_started_total", "counter"),
    ("arenaplan_solves_finished_total", "counter"),
    ("arenaplan_solve_seconds", "histogram"),
    ("arenaplan_jobs_recovered_total", "counter"),
    ("arenaplan_jobs", "gauge"),
]


def _samples(text: str) -> dict[str, float]:
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines() if line and not line.startswith("#")}


def test_names_types_labels_and_values():
    metrics = ServiceMetrics()
    counts = {"queued": 2, "done": 5}
    metrics.registry.register(ScrapedGauge("arenaplan_jobs", "plan jobs in the store by state",
                                           "state", lambda: counts))
    metrics.requests.labels(method="POST", route="/plan", status="200").inc()
    metrics.requests.labels(method="POST", route="/plan", status="200").inc()
    metrics.request_seconds.labels(route="/plan").observe(0.3)
    metrics.submissions.labels(outcome="cached").inc()
    metrics.solves_started.inc()
    metrics.solves_finished.labels(outcome="done").inc()
    metrics.solve_seconds.labels(outcome="done").observe(4)
    metrics.recovered.labels(action="requeued").inc(3)
    text = metrics.render().decode()

    types = [tuple(line.split()[2:4]) for line in text.splitlines() if line.startswith("# TYPE")]
    assert types == NAMES_AND_TYPES
    samples = _samples(text)
    assert samples['arenaplan_http_requests_total{method="POST",route="/plan",status="200"}'] == 2
    assert samples['arenaplan_http_request_duration_seconds_bucket{le="0.25",route="/plan"}'] == 0
    assert samples['arenaplan_http_request_duration_seconds_bucket{le="0.5",route="/plan"}'] == 1
    assert samples['arenaplan_http_request_duration_seconds_bucket{le="+Inf",route="/plan"}'] == 1
    assert samples['arenaplan_http_request_duration_seconds_sum{route="/plan"}'] == 0.3
    assert samples['arenaplan_plan_submissions_total{outcome="cached"}'] == 1
    assert samples["arenaplan_solves_started_total"] == 1
    assert samples['arenaplan_solves_finished_total{outcome="done"}'] == 1
    assert samples['arenaplan_solve_seconds_count{outcome="done"}'] == 1
    assert samples['arenaplan_jobs_recovered_total{action="requeued"}'] == 3
    assert samples['arenaplan_jobs{state="done"}'] == 5

    counts["done"] = 6  # gauges are read when scraped, not when registered
    assert _samples(metrics.render().decode())['arenaplan_jobs{state="done"}'] == 6


def test_no_library_extras_and_one_registry_per_app():
    """No `_created` series and no process/GC collectors: only what the service counts."""
    first, second = ServiceMetrics(), ServiceMetrics()
    first.solves_started.inc()
    text = second.render().decode()
    assert "_created" not in text and "process_" not in text and "python_" not in text
    assert _samples(text)["arenaplan_solves_started_total"] == 0
    assert _samples(first.render().decode())["arenaplan_solves_started_total"] == 1


def test_made_up_methods_and_paths_do_not_add_series():
    """Issue 15, F8: 3,000 made-up HTTP methods took /metrics from 21 KB to 547 KB. Methods
    outside HTTP's own are counted as one `other`, unmatched paths as one `unmatched` route."""
    metrics = ServiceMetrics()

    async def not_found(scope, receive, send):
        await send({"type": "http.response.start", "status": 404, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    app = RequestMetricsMiddleware(not_found, metrics)

    async def call(method: str, path: str) -> None:
        await app({"type": "http", "method": method, "path": path}, None, _ignore)

    async def requests() -> None:
        for i in range(50):
            await call(f"BREW{i}", f"/pot/{i}")
        await call("GET", "/nowhere")

    asyncio.run(requests())
    samples = _samples(metrics.render().decode())
    counted = {k: v for k, v in samples.items() if k.startswith("arenaplan_http_requests_total")}
    assert counted == {
        'arenaplan_http_requests_total{method="other",route="unmatched",status="404"}': 50,
        'arenaplan_http_requests_total{method="GET",route="unmatched",status="404"}': 1,
    }


async def _ignore(_message) -> None:
    return None
