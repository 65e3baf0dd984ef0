"""The costs a stored plan was made with: `GET /plans/{id}/profile` and the status's `profile`.

A plan id names the request (model, canonical request, planner version), not a measurement made
later: a request without a profile is planned with costs the solver measures, and two
measurements may give two plans. The service keeps the first plan made for an id and, beside it,
the profile that plan was made with (`PlanBodies.write_profile`, written before the job is marked
done), so that a client can pin those costs: plan again with them, or send them in a request.

Where the costs came from (`ProfileSource`), read from the stored plan and its files:

- `supplied`: the request carried its profile; the client has it already (404 here);
- `measured`: the solver measured it; served from the file beside the plan (404 when that file is
  gone: a plan made before profiles were kept, or a lost file);
- `none`: no costs were needed (keeping every value fit the one budget) and none was measured.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from fastapi.responses import Response

from schemas.service import ProfileSource
from service.errors import ApiProblem
from service.plan_bodies import PlanBodies
from service.store import JobView


def profile_source(bodies: PlanBodies, job: JobView,
                   stored_json: Callable[[], str | None]) -> ProfileSource:
    """Where a done plan's costs came from. Blocking (disk, store): call it from a thread."""
    body = bodies.load(job.plan_id, stored_json)
    assert body is not None, "a done job has its plan"
    plan = json.loads(body.plan_json)
    if plan["request"].get("profile") is not None:
        return "supplied"
    if bodies.read_profile(job.plan_id, job.model_sha256) is not None:
        return "measured"
    # Costs priced the plan, yet no file: measured, by a version that did not keep profiles.
    return "measured" if plan.get("predicted_seconds") is not None else "none"


def stored_profile_response(bodies: PlanBodies, job: JobView,
                            stored_json: Callable[[], str | None]) -> Response:
    """200 with the profile the solver measured for a done plan, else 404 saying why there is
    none to fetch. Blocking (disk, store): call it from a thread."""
    plan_id = job.plan_id
    if job.state != "done":
        doing = "failed: no plan was made" if job.state == "failed" else f"still {job.state}"
        raise ApiProblem(404, "not_found", f"plan {plan_id} is {doing}; the profile it is "
                         f"planned with is kept once the plan is done (GET /plans/{plan_id}/"
                         "status says when)", plan_id=plan_id)
    data = bodies.read_profile(plan_id, job.model_sha256)
    if data is not None:
        return Response(data, media_type="application/json")
    source = profile_source(bodies, job, stored_json)
    if source == "supplied":
        detail = ("the request of this plan carried its own profile, and the plan was made with "
                  f"it: that profile is the one you sent (GET /plans/{plan_id} shows it in "
                  "`request.profile`)")
    elif source == "measured":
        detail = ("this plan was made with a profile the service measured but did not keep (a "
                  "plan made before profiles were kept, or its file was lost); to pin costs, "
                  "measure them with `arenaplan profile` and send them in the request")
    else:
        detail = ("this plan needed no per-op costs (keeping every value fits the budget), so no "
                  "profile was measured for it")
    raise ApiProblem(404, "not_found", detail, plan_id=plan_id)
