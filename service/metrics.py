"""Prometheus metrics through prometheus_client, shown as text (exposition format 0.0.4).

Counters and histograms live in this process; gauges are read when scraped (`ScrapedGauge`:
jobs by state come from the store, so they are right after a restart and across instances).
Each app has its own registry, so /metrics shows exactly these series and nothing of the
library's default process collectors.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping

from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics
from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

# /metrics has never shown `*_created` series; the switch is process-wide in prometheus_client.
disable_created_metrics()

TEXT_FORMAT = "text/plain; version=0.0.4"
REQUEST_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
SOLVE_BUCKETS = (0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
# Label values come from a bounded set, so no client can grow /metrics: HTTP's own methods
# (anything else counts as "other") and route templates ("unmatched" for every unknown path).
HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS",
                          "TRACE", "CONNECT"})
OTHER_METHOD = "other"
UNMATCHED_ROUTE = "unmatched"


class ScrapedGauge(Collector):
    """A gauge with one label, read when scraped: `read()` returns label value -> value."""

    def __init__(self, name: str, help_text: str, label: str,
                 read: Callable[[], Mapping[str, float]]):
        self.name, self.help, self.label, self.read = name, help_text, label, read

    def _family(self) -> GaugeMetricFamily:
        return GaugeMetricFamily(self.name, self.help, labels=[self.label])

    def describe(self) -> list[Metric]:
        """What the registry checks for name clashes, without reading the value (the store)."""
        return [self._family()]

    def collect(self) -> Iterator[Metric]:
        family = self._family()
        for label_value, value in self.read().items():
            family.add_metric([label_value], value)
        yield family


class ServiceMetrics:
    """Everything /metrics shows. Gauges are registered by the app once the store exists."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "arenaplan_http_requests_total", "HTTP requests by method, route and status",
            ["method", "route", "status"], registry=self.registry)
        self.request_seconds = Histogram(
            "arenaplan_http_request_duration_seconds", "HTTP request latency by route",
            ["route"], buckets=REQUEST_BUCKETS, registry=self.registry)
        self.submissions = Counter(
            "arenaplan_plan_submissions_total",
            "POST /plan by outcome: new job, cached (plan already stored), existing job "
            "(queued, running or failed), requeued", ["outcome"], registry=self.registry)
        self.solves_started = Counter(
            "arenaplan_solves_started_total", "solver runs started by this instance",
            registry=self.registry)
        self.solves_finished = Counter(
            "arenaplan_solves_finished_total",
            "solver runs finished by this instance, by outcome (done or the error kind)",
            ["outcome"], registry=self.registry)
        self.solve_seconds = Histogram(
            "arenaplan_solve_seconds", "wall time of solver runs by outcome", ["outcome"],
            buckets=SOLVE_BUCKETS, registry=self.registry)
        self.recovered = Counter(
            "arenaplan_jobs_recovered_total",
            "running jobs found without a live instance: requeued or failed", ["action"],
            registry=self.registry)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class RequestMetricsMiddleware:
    """ASGI middleware: count every HTTP request by method, route template and status (each
    label from a bounded set)."""

    def __init__(self, app: ASGIApp, metrics: ServiceMetrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = {"code": 500}

        async def send_wrapper(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route = scope.get("route")
            path = getattr(route, "path", None) or UNMATCHED_ROUTE
            method = scope["method"] if scope["method"] in HTTP_METHODS else OTHER_METHOD
            self.metrics.requests.labels(method=method, route=path,
                                         status=str(status["code"])).inc()
            self.metrics.request_seconds.labels(route=path).observe(
                time.perf_counter() - started)
