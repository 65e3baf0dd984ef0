"""Prometheus metrics in the text exposition format (version 0.0.4), without a client library.

Counters and histograms live in this process; gauges are computed when scraped (jobs by state
come from the store, so they are right after a restart and across instances).
"""

from __future__ import annotations

import bisect
import math
import threading
import time
from collections.abc import Callable, Iterable

Labels = tuple[tuple[str, str], ...]

REQUEST_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
SOLVE_BUCKETS = (0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(labels: Labels) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels) + "}"


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value)) if not float(value).is_integer() else str(int(value))


class Counter:
    def __init__(self, name: str, help_text: str):
        self.name, self.help = name, help_text
        self._values: dict[Labels, float] = {}
        self._lock = threading.Lock()

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        key = tuple(sorted(labels.items()))
        with self._lock:
            self._values[key] = self._values.get(key, 0.0) + amount

    def value(self, **labels: str) -> float:
        return self._values.get(tuple(sorted(labels.items())), 0.0)

    def render(self) -> Iterable[str]:
        yield f"# HELP {self.name} {self.help}"
        yield f"# TYPE {self.name} counter"
        with self._lock:
            items = sorted(self._values.items())
        for labels, value in items:
            yield f"{self.name}{_labels(labels)} {_number(value)}"


class Histogram:
    def __init__(self, name: str, help_text: str, buckets: tuple[float, ...]):
        self.name, self.help, self.buckets = name, help_text, tuple(sorted(buckets))
        self._series: dict[Labels, list] = {}  # labels -> [bucket counts..., sum, count]
        self._lock = threading.Lock()

    def observe(self, value: float, **labels: str) -> None:
        key = tuple(sorted(labels.items()))
        with self._lock:
            series = self._series.setdefault(key, [0] * len(self.buckets) + [0.0, 0])
            index = bisect.bisect_left(self.buckets, value)
            for i in range(index, len(self.buckets)):
                series[i] += 1
            series[-2] += value
            series[-1] += 1

    def render(self) -> Iterable[str]:
        yield f"# HELP {self.name} {self.help}"
        yield f"# TYPE {self.name} histogram"
        with self._lock:
            items = sorted((k, list(v)) for k, v in self._series.items())
        for labels, series in items:
            for bound, count in zip(self.buckets, series, strict=False):
                le = labels + (("le", _number(bound)),)
                yield f"{self.name}_bucket{_labels(le)} {count}"
            yield f"{self.name}_bucket{_labels(labels + (('le', '+Inf'),))} {series[-1]}"
            yield f"{self.name}_sum{_labels(labels)} {_number(series[-2])}"
            yield f"{self.name}_count{_labels(labels)} {series[-1]}"


class Gauge:
    """A gauge read when scraped: `collect()` returns label dicts -> values."""

    def __init__(self, name: str, help_text: str,
                 collect: Callable[[], Iterable[tuple[dict[str, str], float]]]):
        self.name, self.help, self.collect = name, help_text, collect

    def render(self) -> Iterable[str]:
        yield f"# HELP {self.name} {self.help}"
        yield f"# TYPE {self.name} gauge"
        for labels, value in self.collect():
            yield f"{self.name}{_labels(tuple(sorted(labels.items())))} {_number(value)}"


class ServiceMetrics:
    """Everything /metrics shows. Gauges are attached by the app once the store exists."""

    def __init__(self) -> None:
        self.requests = Counter(
            "arenaplan_http_requests_total", "HTTP requests by method, route and status")
        self.request_seconds = Histogram(
            "arenaplan_http_request_duration_seconds", "HTTP request latency by route",
            REQUEST_BUCKETS)
        self.submissions = Counter(
            "arenaplan_plan_submissions_total",
            "POST /plan by outcome: new job, cached (plan already stored), existing job "
            "(queued, running or failed), requeued")
        self.solves_started = Counter(
            "arenaplan_solves_started_total", "solver runs started by this instance")
        self.solves_finished = Counter(
            "arenaplan_solves_finished_total",
            "solver runs finished by this instance, by outcome (done or the error kind)")
        self.solve_seconds = Histogram(
            "arenaplan_solve_seconds", "wall time of solver runs by outcome", SOLVE_BUCKETS)
        self.recovered = Counter(
            "arenaplan_jobs_recovered_total",
            "running jobs found without a live instance: requeued or failed")
        self._gauges: list[Gauge] = []

    def add_gauge(self, gauge: Gauge) -> None:
        self._gauges.append(gauge)

    def render(self) -> str:
        lines: list[str] = []
        for metric in (self.requests, self.request_seconds, self.submissions,
                       self.solves_started, self.solves_finished, self.solve_seconds,
                       self.recovered, *self._gauges):
            lines.extend(metric.render())
        return "\n".join(lines) + "\n"


class RequestMetricsMiddleware:
    """ASGI middleware: count every HTTP request by method, route template and status."""

    def __init__(self, app, metrics: ServiceMetrics):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = {"code": 500}

        async def send_wrapper(message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route = scope.get("route")
            path = getattr(route, "path", None) or "unmatched"
            self.metrics.requests.inc(method=scope["method"], route=path,
                                      status=str(status["code"]))
            self.metrics.request_seconds.observe(time.perf_counter() - started, route=path)
