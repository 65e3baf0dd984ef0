"""The solver process: receives jobs over a pipe, runs the planner (`plan_model_costed`), answers.

It runs in its own process (spawned, never forked from the threaded server) so a solve never
blocks the API, can be killed at its time limit, and a crash takes down only itself. Messages
(all plain tuples/dicts, pickled by the pipe):

- parent -> worker: `("job", plan_id, model_path, request_json)`
- worker -> parent: `("ready", pid)` once the planner is imported; `("progress", phase, info)`
  as the planner reports; then `("done", plan_json, profile_json)` or `("failed", error_dict)`.
  `profile_json` is the profile the planner measured for the plan (the request had none, and the
  plan needed costs), else None: the service keeps it beside the plan (`service.plan_profiles`).

`error_dict` has `error`, `detail`, `status` (422 input, 409 no plan), `retryable` and, for an
infeasible budget, `smallest_feasible_bytes` / `is_lower_bound`.
"""

from __future__ import annotations

import math
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the planner is imported in the solver process only, once it has started
    from planner.pipeline.orchestrate import Costed
    from schemas.plan import PlanRequest

PARENT_POLL_S = 1.0


def worker_main(conn: Connection) -> None:
    """Entry point of a solver process."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the server's to handle
    _exit_with_parent()
    try:
        os.nice(5)  # the API process keeps priority over solvers on a shared machine
    except OSError:
        pass
    # heavy imports once, before saying ready
    from planner.pipeline.orchestrate import plan_model_costed
    from schemas.plan import PlanRequest

    conn.send(("ready", os.getpid()))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message[0] == "stop":
            return
        _, plan_id, model_path, request_json = message
        conn.send(_solve(plan_model_costed, PlanRequest, conn, plan_id, model_path,
                         request_json))


def _solve(plan_model: Callable[..., Costed], request_type: type[PlanRequest], conn: Connection,
           plan_id: str, model_path: str, request_json: str) -> tuple:
    lock = threading.Lock()  # solvers may report from their own threads

    def progress(phase: str, info: dict) -> None:
        with lock:
            conn.send(("progress", phase, _plain(info)))

    try:
        request = request_type.model_validate_json(request_json)
        if not os.path.isfile(model_path):
            return ("failed", {
                "error": "planner_error", "status": 409, "retryable": True, "plan_id": plan_id,
                "detail": "the uploaded model is missing from the service's model store; "
                "upload it again",
            })
        costed = plan_model(model_path, request, progress=progress)
        plan, profile = costed.plan, costed.measured_profile
        if plan.plan_id != plan_id:
            return ("failed", {
                "error": "planner_error", "status": 409, "retryable": True, "plan_id": plan_id,
                "detail": f"the planner made plan {plan.plan_id} for job {plan_id}: the stored "
                "model does not match its hash; upload it again",
            })
        return ("done", plan.model_dump_json(),
                None if profile is None else profile.model_dump_json())
    except Exception as exc:  # noqa: BLE001 - every failure becomes a job error
        return ("failed", classify_error(exc, plan_id))


def classify_error(exc: BaseException, plan_id: str) -> dict:
    """A planner exception -> the job's error: what went wrong and what to change."""
    from schemas.errors import ArenaplanError, InfeasibleError

    if isinstance(exc, InfeasibleError):
        error = {"error": "infeasible", "status": 409, "retryable": False,
                 "detail": str(exc), "is_lower_bound": bool(exc.is_lower_bound)}
        if exc.smallest_feasible is not None:
            error["smallest_feasible_bytes"] = int(exc.smallest_feasible)
    elif isinstance(exc, ArenaplanError):
        from planner.errors import ModelError

        kind = "invalid_model" if isinstance(exc, ModelError) else "invalid_request"
        error = {"error": kind, "status": 422, "retryable": False, "detail": str(exc)}
    elif isinstance(exc, MemoryError):
        error = {"error": "worker_crashed", "status": 409, "retryable": True,
                 "detail": "the solver ran out of memory; ask for a shorter time limit or "
                 "fewer workers, or run the service with more memory"}
    else:
        traceback.print_exc(file=sys.stderr)
        error = {"error": "planner_error", "status": 409, "retryable": True,
                 "detail": f"the planner failed on this input ({type(exc).__name__}: "
                 f"{str(exc)[:500]}); this is a bug in arenaplan, please report it with the "
                 "model and request"}
    error["plan_id"] = plan_id
    return error


def _plain(info: dict) -> dict:
    """Keep the JSON-friendly scalars of a progress report."""
    out: dict = {}
    for key, value in (info or {}).items():
        if isinstance(value, float) and not math.isfinite(value):
            value = None  # JSON has no infinities (an unbounded bound, say)
        if isinstance(value, bool | int | float | str) or value is None:
            out[str(key)] = value
    return out


def _exit_with_parent() -> None:
    """Exit when the server process dies (killed without a chance to stop its workers).

    On Linux the kernel kills us with the parent (PR_SET_PDEATHSIG); everywhere, a thread also
    checks every second whether we were re-parented.
    """
    parent = os.getppid()
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # 1 = PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    def watch() -> None:
        while True:
            time.sleep(PARENT_POLL_S)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()
