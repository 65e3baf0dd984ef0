"""The profile a plan request is solved with: the request's own, else one measured now.

A request may carry a profile measured elsewhere (`arenaplan profile`); without one, the CPU is
measured here with the quick timing policy (cached), and a budget on a GPU this machine lacks is
an input error that says how to get a profile. Extra host arenas `cpu:N` run on the CPU: the
profile is extended with the CPU's costs for them (`with_host_arenas`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from planner.errors import InvalidInputError
from planner.ir.graph import Graph
from planner.profile.costs import HOST_COPY, measured_as
from planner.profile.runner import profile_graph
from planner.profile.timing import QUICK_POLICY
from schemas.plan import PlanRequest
from schemas.profile import CopyFit, Profile


def profile_for(graph: Graph, request: PlanRequest,
                notify: Callable[[str, dict], None], time_limit_s: float | None = None
                ) -> Profile:
    """The request's profile, else one measured now (CPU: quick timing policy, cached; ops not
    measured within `time_limit_s` get labelled estimates, planner.profile.runner), with the
    extra host arenas among its budgets (`with_host_arenas`). `notify("profile", ...)` is
    called before measuring."""
    devices = list(request.budgets)
    profile = request.profile
    if profile is None:
        measured = list(dict.fromkeys(measured_as(d) for d in devices))
        notify("profile", {"devices": measured})
        try:
            profile = profile_graph(graph, measured, policy=QUICK_POLICY,
                                    time_limit_s=time_limit_s)
        except InvalidInputError as exc:
            gpus = [d for d in measured if d != "cpu"]
            if gpus:
                raise InvalidInputError(
                    f"budgets for {', '.join(gpus)} need per-op costs on that device, and this "
                    f"machine cannot measure them ({exc}); pass --profile with a profile "
                    "measured on a GPU machine (arenaplan profile MODEL --device cpu --device "
                    f"{gpus[0]} -o profile.json)"
                ) from None
            raise
    return with_host_arenas(profile, devices)


def with_host_arenas(profile: Profile, devices: Sequence[str]) -> Profile:
    """`profile` extended for extra host arenas among `devices`: each `cpu:N` gets the `cpu`
    costs and host copies (HOST_COPY, labelled as assumed) to and from every other host arena,
    so that the validator prices plans that use them."""
    extra = [d for d in devices if d.startswith("cpu:") and d not in profile.devices]
    if not extra or "cpu" not in profile.devices:
        return profile
    ops = [op.model_copy(update={"costs": {**op.costs, **{d: op.costs["cpu"] for d in extra
                                                         if "cpu" in op.costs}}})
           for op in profile.ops]
    hosts = ["cpu", *[d for d in devices if d.startswith("cpu:")]]
    have = {(f.src, f.dst) for f in profile.copies}
    copies = list(profile.copies) + [
        CopyFit(src=a, dst=b, latency_seconds=HOST_COPY.latency,
                bytes_per_second=HOST_COPY.bytes_per_second,
                method="assumed host memcpy between host arenas (not measured)")
        for a in hosts for b in hosts if a != b and (a, b) not in have
    ]
    return profile.model_copy(update={"devices": [*profile.devices, *extra], "ops": ops,
                                      "copies": copies})


def carried_over(profile: Profile, graph: Graph) -> Profile | None:
    """`profile`'s costs for `graph`'s ops, found by name and op type and numbered as `graph`
    numbers them; None when one of its ops is not in the profile. A profile of the graph with
    schemas.late_recompute's copies prices the graph without them this way: every op of that
    graph is in it under the same name (checked on the 12 bench models), and one profile for
    both keeps their comparison free of the host's noise between two profiles (up to 1.6x
    here, minutes apart)."""
    by_name = {entry.name: entry for entry in profile.ops}
    entries = []
    for op in graph.ops:
        entry = by_name.get(op.name)
        if entry is None or entry.op_type != op.op_type:
            return None
        entries.append(entry.model_copy(update={"op_id": op.id}))
    return profile.model_copy(update={"ops": entries})
