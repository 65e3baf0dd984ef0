"""Fetching a plan from an arenaplan server: `GET {server}/plans/{id}` with the standard library.

The server answers 200 with the plan JSON when it is done, 202 while it is still solving, 404 for
an id it does not know, and a 4xx with a JSON `detail` when planning failed (an infeasible budget
is raised as `InfeasibleError` with the smallest feasible budget the server named). An API key,
from the argument or the ARENAPLAN_API_KEY environment variable, goes in an
`Authorization: Bearer KEY` header. With `wait_s` the client polls a 202 until the plan is ready
(honouring the server's Retry-After) or the wait is over.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request

from runtime.errors import PlanFetchError, PlanNotFoundError, PlanNotReadyError
from runtime.plan_io import parse_plan
from schemas.errors import InfeasibleError
from schemas.plan import Plan

API_KEY_ENV = "ARENAPLAN_API_KEY"


def plan_url(server: str, plan_id: str) -> str:
    parsed = urllib.parse.urlparse(server)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise PlanFetchError(f"--server must be an http(s) URL such as http://host:8000, got "
                             f"{server!r}")
    return f"{server.rstrip('/')}/plans/{urllib.parse.quote(plan_id, safe='')}"


def fetch_plan(server: str, plan_id: str, *, api_key: str | None = None, timeout_s: float = 30.0,
               wait_s: float = 0.0, poll_s: float = 1.0) -> Plan:
    """The plan `plan_id` from `server`; typed errors for not ready, unknown and failed plans."""
    return parse_plan(fetch_plan_bytes(server, plan_id, api_key=api_key, timeout_s=timeout_s,
                                       wait_s=wait_s, poll_s=poll_s))


def fetch_plan_bytes(server: str, plan_id: str, *, api_key: str | None = None,
                     timeout_s: float = 30.0, wait_s: float = 0.0, poll_s: float = 1.0) -> bytes:
    """The plan's JSON exactly as the server stored it (so CI can hash or diff it)."""
    url = plan_url(server, plan_id)
    key = api_key if api_key is not None else os.environ.get(API_KEY_ENV)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return _get_once(url, plan_id, key, timeout_s)
        except PlanNotReadyError as not_ready:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise
            time.sleep(min(remaining, not_ready.retry_after or poll_s))


def _get_once(url: str, plan_id: str, key: str | None, timeout_s: float) -> bytes:
    headers = {"Accept": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    request = urllib.request.Request(url, headers=headers, method="GET")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310
            status, body, retry = response.status, response.read(), \
                response.headers.get("Retry-After")
    except urllib.error.HTTPError as exc:
        status, body, retry = exc.code, exc.read(), exc.headers.get("Retry-After")
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise PlanFetchError(f"cannot reach the plan server at {url}: {reason}") from None
    if status == 200:
        return body
    detail = _detail(body)
    if status == 202:
        raise PlanNotReadyError(
            f"plan {plan_id} is still being solved on the server (HTTP 202); try again later "
            "or pass --wait SECONDS", status, retry_after=_seconds(retry))
    if status == 404:
        raise PlanNotFoundError(
            f"the server has no plan {plan_id} (HTTP 404){f': {detail}' if detail else ''}; "
            "check the id, or submit the model and request first", status)
    if status in (401, 403):
        raise PlanFetchError(
            f"the server refused access to plan {plan_id} (HTTP {status})"
            f"{f': {detail}' if detail else ''}; pass --api-key or set {API_KEY_ENV}", status)
    if status == 409 and _error_kind(body) == "infeasible":
        raise InfeasibleError(f"the server found no plan for {plan_id}: {detail}",
                              smallest_feasible=_json(body).get("smallest_feasible_bytes"),
                              is_lower_bound=bool(_json(body).get("is_lower_bound")))
    if 400 <= status < 500:
        raise PlanFetchError(f"the server could not make plan {plan_id} (HTTP {status}): "
                             f"{detail or 'no detail given'}", status)
    raise PlanFetchError(f"the plan server failed (HTTP {status})"
                         f"{f': {detail}' if detail else ''}; try again later", status)


def _json(body: bytes) -> dict:
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return {}
    return data if isinstance(data, dict) else {"detail": data}


def _error_kind(body: bytes) -> str | None:
    return _json(body).get("error")


def _detail(body: bytes) -> str:
    data = _json(body)
    if not data:
        return body[:200].decode("utf-8", "replace").strip()
    detail = data.get("detail")
    return detail if isinstance(detail, str) else json.dumps(detail)[:300]


def _seconds(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None
