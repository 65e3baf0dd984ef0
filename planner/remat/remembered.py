"""The schedule of least peak found for a graph on one device, kept on disk between requests.

A refusal names the smallest budget this planner meets (planner.pipeline.infeasible): the arena
of the schedule of least peak its bisection reached (planner.remat.smallest) in the time the
request had left. A request for that budget has its own time, spent first on its own search:
on a loaded host it may reach less deep, and be refused naming a larger budget (mlp_sgd at 1 s
under CI load: refused at its op-footprint bound naming 64,640 B; asked for 64,640 B, refused
again naming the keep-everything arena, 66,688 B). So the least peak schedule found is kept per
graph, device and alignment, and each bisection starts from it: the budgets a refusal names only
go down, and a request for one finds its schedule again without searching.

An entry holds the schedule's events and its peak, and the offsets of the smallest layout a plan
of it got (planner.pipeline.infeasible.smallest_plan): a layout given less time can come out
larger (GPT-2-small's, 1,824,774,080 B with 2 s, 1,829,924,800 B with 0.3 s), and the budget a
refusal named is that arena. It is keyed by what its validity depends on
(the graph's ops and tensor sizes, the device, the alignment) and checked by replaying it on
the graph it is loaded for: one that does not replay, or whose peak differs, is a miss. Entries
over MAX_TOTAL_BYTES in all go least recently used first. A cache that cannot be written is only
slower.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path

from planner.cache_dir import cache_dir, prune_oldest, write_whole
from planner.ir.graph import Graph
from planner.memory.schedule import Compute, Event, Free, Schedule, ScheduleError, home_on
from planner.memory.simulate import simulate
from planner.profile.costs import CostTable
from planner.remat.heuristics import Candidate

DIRECTORY_NAME = "least-peak-schedules"
SUFFIX = ".json"
MAX_TOTAL_BYTES = 256 * 2**20
NAME = "the schedule of least peak found for this graph before (planner.remat.remembered)"


def remembered_schedule(graph: Graph, device: str, costs: CostTable, memory_unit: int,
                        directory: Path | None = None) -> Candidate | None:
    """The schedule of least peak kept for `graph` on `device`, replayed with `costs`; None when
    none is kept, or what is kept does not replay to its recorded peak."""
    path = _path(graph, device, memory_unit, directory)
    entry = _read(path)
    if entry is None:
        return None
    try:
        schedule = Schedule(tuple(_decode(entry["events"], device)), home_on(graph, device))
        stats = simulate(graph, schedule, costs, alignment=memory_unit)
    except (ValueError, KeyError, TypeError, IndexError, ScheduleError):
        return None
    if stats.peaks.get(device) != entry.get("peak"):
        return None
    with contextlib.suppress(OSError):
        os.utime(path)  # the least recently used go first
    return Candidate(NAME, None, None, schedule, stats)


def remember_schedule(graph: Graph, device: str, memory_unit: int, candidate: Candidate,
                      directory: Path | None = None) -> None:
    """Keep `candidate`, a schedule on `device` alone, for `graph` in place of what is kept (the
    caller passes one below the peak of what remembered_schedule returned: an entry that does
    not replay is replaced whatever it claims)."""
    with contextlib.suppress(ValueError):
        _write(_path(graph, device, memory_unit, directory),
               {"peak": candidate.stats.peaks[device],
                "events": _encode(candidate.schedule.events, device)})


def remembered_layout(graph: Graph, device: str, memory_unit: int, schedule: Schedule,
                      directory: Path | None = None) -> dict[str, int] | None:
    """The offsets of the smallest layout kept for `schedule` when it is the schedule kept for
    `graph` on `device` (planner.layout.choose.plan_layout checks them before using them)."""
    entry = _read(_path(graph, device, memory_unit, directory))
    if entry is None or not _same(entry, schedule, device):
        return None
    layout = entry.get("layout")
    offsets = layout.get("offsets") if isinstance(layout, dict) else None
    if not isinstance(offsets, dict) or not all(
            isinstance(k, str) and type(v) is int for k, v in offsets.items()):
        return None  # damaged: laid out afresh
    return offsets


def remember_layout(graph: Graph, device: str, memory_unit: int, schedule: Schedule,
                    arena: int, offsets: Mapping[str, int], directory: Path | None = None
                    ) -> None:
    """Keep a layout of `schedule` (`offsets` by buffer id, `arena` bytes) with the schedule kept
    for `graph` on `device` when `schedule` is that one and `arena` is below the one kept."""
    path = _path(graph, device, memory_unit, directory)
    entry = _read(path)
    if entry is None or not _same(entry, schedule, device):
        return
    kept = entry.get("layout")
    known = kept.get("arena") if isinstance(kept, dict) else None
    if type(known) is int and known <= arena:
        return
    _write(path, {**entry, "layout": {"arena": arena, "offsets": dict(offsets)}})


def _same(entry: dict, schedule: Schedule, device: str) -> bool:
    try:
        return bool(entry["events"] == _encode(schedule.events, device))
    except (KeyError, ValueError):
        return False


def _read(path: Path) -> dict | None:
    try:
        entry = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    return entry if isinstance(entry, dict) else None


def _write(path: Path, entry: dict) -> None:
    with contextlib.suppress(OSError):
        write_whole(path, json.dumps(entry).encode())
        prune_oldest(path.parent, f"*{SUFFIX}", MAX_TOTAL_BYTES)


def _path(graph: Graph, device: str, memory_unit: int, directory: Path | None) -> Path:
    key = json.dumps([
        graph.model_sha256, None if graph.optimized is None else graph.optimized.sha256,
        [(op.op_type, op.inputs, op.outputs) for op in graph.ops],
        [t.nbytes for t in graph.tensors], device, memory_unit,
    ])
    name = hashlib.sha256(key.encode()).hexdigest()[:32] + SUFFIX
    return (directory or cache_dir()) / DIRECTORY_NAME / name


def _encode(events: tuple[Event, ...], device: str) -> list[int]:
    """A compute as 2 * op + recompute, a free as -1 - tensor (one device, no copies)."""
    encoded = []
    for event in events:
        if isinstance(event, Compute) and event.device == device:
            encoded.append(2 * event.op + event.recompute)
        elif isinstance(event, Free) and event.device == device:
            encoded.append(-1 - event.tensor)
        else:
            raise ValueError(f"not a schedule on {device} alone: {event}")
    return encoded


def _decode(encoded: list[int], device: str) -> list[Event]:
    return [Compute(code // 2, device, bool(code % 2)) if code >= 0 else Free(-1 - code, device)
            for code in encoded]
