"""Write a profile to JSON and read one back, checking that it belongs to the graph at hand."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from planner.errors import InvalidInputError
from planner.ir.graph import Graph
from schemas.profile import Profile


def save_profile(profile: Profile, path: str | Path) -> None:
    Path(path).write_text(profile.model_dump_json(indent=2) + "\n")


def parse_profile(text: str | bytes, source: str = "profile") -> Profile:
    try:
        return Profile.model_validate_json(text)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "(top level)"
        raise InvalidInputError(
            f"{source} is not a valid arenaplan profile: {where}: {first.get('msg')} "
            f"({exc.error_count()} problem(s)); write it with `arenaplan profile`"
        ) from None


def check_profile_matches(profile: Profile, graph: Graph, source: str = "profile") -> None:
    """Accept a profile of this exact model, or of a model with the same ops (count and types in
    order, e.g. the same network re-exported); refuse anything else with what differs."""
    by_id = sorted(profile.ops, key=lambda o: o.op_id)
    if [o.op_id for o in by_id] != list(range(len(by_id))):
        raise InvalidInputError(f"{source} has missing or repeated op ids; re-profile the model")
    if profile.model_sha256 == graph.model_sha256 and len(by_id) == len(graph.ops):
        return
    if len(by_id) != len(graph.ops):
        raise InvalidInputError(
            f"{source} was made for another model (sha256 {profile.model_sha256[:12]}..., "
            f"{len(by_id)} ops) but this model ({graph.model_sha256[:12]}...) has "
            f"{len(graph.ops)} ops; profile this model with `arenaplan profile`"
        )
    for entry, op in zip(by_id, graph.ops, strict=True):
        if entry.op_type != op.op_type:
            raise InvalidInputError(
                f"{source} was made for another model (sha256 {profile.model_sha256[:12]}...): "
                f"its op #{op.id} is {entry.op_type} but this model's is {op.op_type} "
                f"({op.name}); profile this model with `arenaplan profile`"
            )


def load_profile(path: str | Path, graph: Graph) -> Profile:
    """Read a profile measured elsewhere and check it belongs to `graph`."""
    path = Path(path)
    try:
        text = path.read_bytes()
    except OSError as exc:
        raise InvalidInputError(f"cannot read profile {path}: {exc.strerror or exc}") from None
    profile = parse_profile(text, source=f"profile {path}")
    check_profile_matches(profile, graph, source=f"profile {path}")
    return profile.model_copy(update={"ops": sorted(profile.ops, key=lambda o: o.op_id)})
