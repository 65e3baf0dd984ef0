"""Which budgets a request may name: the planner needs per-op costs on every budget's device.

The costs come from the request's `profile`, else the solver measures them on the service's own
machine, which can measure only the devices in ARENAPLAN_MEASURE_DEVICES (`cpu` by default; a
GPU host adds `cuda:0`...). Checked when a request arrives, the same way for every request: a
`cuda:0` budget alone and `cpu` + `cuda:0` both need costs on cuda:0, whether or not the plan
would fit without them (before, the first was planned and the second refused after solving).
Extra host arenas `cpu:N` run on the CPU and use its costs.
"""

from __future__ import annotations

from collections.abc import Collection

from planner.profile.costs import measured_as
from schemas.plan import PlanRequest
from service.errors import ApiProblem


def check_costs_available(request: PlanRequest, measurable: Collection[str]) -> None:
    """Raise a 422 naming the devices whose costs neither the request nor the service has."""
    needed = list(dict.fromkeys(measured_as(device) for device in request.budgets))
    profile = request.profile
    if profile is not None:
        missing = [device for device in needed if device not in profile.devices]
        if missing:
            raise ApiProblem(
                422, "invalid_request",
                f"the request's profile has no costs on {', '.join(missing)}, which its budgets "
                f"name; profile the model on those devices too (arenaplan profile MODEL "
                f"{_device_options(needed)} -o profile.json)",
                errors=[f"profile.devices: lacks {device}" for device in missing])
        return
    missing = [device for device in needed if device not in measurable]
    if missing:
        raise ApiProblem(
            422, "invalid_request",
            f"budgets for {', '.join(missing)} need per-op costs on that device, and this service "
            f"measures only {', '.join(measurable) or 'nothing'} (ARENAPLAN_MEASURE_DEVICES); add "
            "a `profile` measured on a machine with that device to the request (arenaplan "
            f"profile MODEL {_device_options(needed)} -o profile.json)",
            errors=[f"budgets.{device}: needs a profile with costs on {device}"
                    for device in missing])


def _device_options(devices: list[str]) -> str:
    return " ".join(f"--device {device}" for device in devices)
