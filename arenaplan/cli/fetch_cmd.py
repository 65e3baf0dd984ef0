"""`arenaplan fetch ID --server URL -o plan.json`: download a plan the service has made.

Exit codes: 0 written; 2 unknown id, failed job (its reason printed), unreachable server or bad
key; 3 the job failed because the budget is infeasible (the message gives the smallest feasible
budget); 4 still solving after --wait seconds. The API key, when the server needs one, comes from
$ARENAPLAN_API_KEY or --api-key-file.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from arenaplan.cli.common import EXIT_BAD_INPUT, EXIT_INFEASIBLE, EXIT_OK

EXIT_PENDING = 4


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "fetch", help="download a plan by id from a planning service",
        description=__doc__.split("\n\n", 1)[1],
    )
    parser.add_argument("plan_id", metavar="ID", help="plan id (from `arenaplan plan-id`)")
    parser.add_argument("--server", required=True, help="service URL, e.g. http://127.0.0.1:8000")
    parser.add_argument("-o", "--output", required=True, help="where to write the plan JSON")
    parser.add_argument("--wait", type=float, default=0.0, metavar="S",
                        help="keep polling this many seconds while the plan is solving")
    parser.add_argument("--api-key-file", metavar="F",
                        help="file holding the API key (default: $ARENAPLAN_API_KEY)")
    parser.add_argument("--timeout", type=float, default=60.0, metavar="S",
                        help="per-request network timeout (default 60)")
    parser.set_defaults(handler=run)


def _api_key(args: argparse.Namespace) -> str | None:
    from schemas.errors import ArenaplanError

    if args.api_key_file:
        try:
            return Path(args.api_key_file).read_text().strip() or None
        except OSError as exc:
            raise ArenaplanError(f"cannot read {args.api_key_file}: {exc.strerror}") from None
    return os.environ.get("ARENAPLAN_API_KEY") or None


def _get(url: str, key: str | None, timeout: float) -> tuple[int, bytes, dict]:
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read(), dict(response.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), dict(exc.headers or {})


def _detail(body: bytes) -> dict:
    try:
        data = json.loads(body)
    except ValueError:
        return {"detail": body[:200].decode("utf-8", "replace")}
    return data if isinstance(data, dict) else {"detail": str(data)}


def run(args: argparse.Namespace) -> int:
    from schemas.errors import ArenaplanError
    from schemas.plan import Plan

    server = args.server.rstrip("/")
    if urllib.parse.urlsplit(server).scheme not in ("http", "https"):
        raise ArenaplanError(f"--server must be an http(s) URL, got {args.server!r}")
    url = f"{server}/plans/{urllib.parse.quote(args.plan_id, safe='')}"
    key = _api_key(args)
    deadline = time.monotonic() + max(0.0, args.wait)
    while True:
        try:
            status, body, headers = _get(url, key, args.timeout)
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ArenaplanError(f"cannot reach {server}: {reason}") from None
        if status == 200:
            try:
                plan = Plan.model_validate_json(body)
            except ValueError as exc:
                first = str(exc).splitlines()[0]
                raise ArenaplanError(f"{url} did not answer a plan: {first}") from None
            if plan.plan_id != args.plan_id:
                raise ArenaplanError(f"{url} answered plan {plan.plan_id}, not {args.plan_id}")
            Path(args.output).write_bytes(body)
            print(f"plan {plan.plan_id} written to {args.output}")
            return EXIT_OK
        info = _detail(body)
        if status == 202:
            progress = info.get("progress") or {}
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                print(f"arenaplan: plan {args.plan_id} is {info.get('status', 'solving')}"
                      f"{' (phase ' + progress['phase'] + ')' if progress.get('phase') else ''};"
                      " fetch again later or pass --wait", file=sys.stderr)
                return EXIT_PENDING
            time.sleep(min(remaining, _retry_after(headers)))
            continue
        detail = info.get("detail", f"HTTP {status}")
        if status == 409 and info.get("error") == "infeasible":
            print(f"arenaplan: infeasible: {detail}", file=sys.stderr)
            return EXIT_INFEASIBLE
        print(f"arenaplan: error: {server} answered {status}: {detail}", file=sys.stderr)
        return EXIT_BAD_INPUT


def _retry_after(headers: dict) -> float:
    value = {k.lower(): v for k, v in headers.items()}.get("retry-after", "1")
    try:
        return min(10.0, max(0.2, float(value)))
    except ValueError:
        return 1.0
