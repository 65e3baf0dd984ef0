"""planner.profile.host_speed: cached costs are reused only at the speed they were measured at.
The speed a cache file recorded is changed in the file itself, as a host that has since become
three times slower (or faster) would find it; the reference kernel and every measurement are
real."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from planner.ir.graph import load_graph
from planner.profile import QUICK_POLICY, ProfileCache, ProgressEvent, profile_graph
from planner.profile.devices import Device
from planner.profile.host_speed import SPEED_TOLERANCE, reference_seconds, speed_epoch
from tests.support.fixture_zoo import FIXTURE_DIR

CPU = Device("cpu", 0)


def recorded_epochs(path: Path) -> tuple[str, dict[str, float]]:
    """The (one) speed-epoch record of the cache file at `path`: its key and epochs."""
    with sqlite3.connect(path) as db:
        rows = [(k, v) for k, v in db.execute("SELECT key, value FROM machine_value")
                if json.loads(k)[0] == "speed-epochs"]
    assert len(rows) == 1
    return rows[0][0], json.loads(rows[0][1])


def rewrite_epochs(path: Path, key: str, epochs: dict[str, float]) -> None:
    rewrite_epochs_text(path, key, json.dumps(epochs))


def rewrite_epochs_text(path: Path, key: str, text: str) -> None:
    with sqlite3.connect(path) as db:
        db.execute("UPDATE machine_value SET value = ? WHERE key = ?", (text, key))


def test_costs_cached_at_another_speed_are_measured_again(tmp_path: Path) -> None:
    graph = load_graph(FIXTURE_DIR / "mlp_sgd.onnx")
    path = tmp_path / "cache.sqlite"
    first = profile_graph(graph, cache=path, policy=QUICK_POLICY)
    assert first.cache.hits == 0 and first.cache.misses > 0
    assert profile_graph(graph, cache=path, policy=QUICK_POLICY).cache.misses == 0
    key, epochs = recorded_epochs(path)
    (name, seconds), = epochs.items()
    # The costs were measured when the reference kernel took a third of its time now.
    rewrite_epochs(path, key, {name: seconds / 3})
    events: list[ProgressEvent] = []
    slower = profile_graph(graph, cache=path, policy=QUICK_POLICY, progress=events.append)
    assert slower.cache.hits == 0 and slower.cache.misses == first.cache.misses
    said = [e.message for e in events if e.phase == "speed"]
    assert len(said) == 1 and "3.00x the time recorded" in said[0]
    assert len(recorded_epochs(path)[1]) == 2  # the new epoch beside the old one
    assert profile_graph(graph, cache=path, policy=QUICK_POLICY).cache.misses == 0


@pytest.mark.parametrize("factor", [1 / SPEED_TOLERANCE ** 0.5, SPEED_TOLERANCE ** 0.5])
def test_an_epoch_within_the_tolerance_is_reused_and_the_closest_wins(tmp_path: Path,
                                                                       factor: float) -> None:
    now = reference_seconds(CPU, 1)
    with ProfileCache(tmp_path / "cache.sqlite") as store:
        first = speed_epoch(store, "m", CPU, 1)
        assert first.drift is None  # the first epoch
        key, _ = recorded_epochs(store.path)
        rewrite_epochs(store.path, key, {"near": now * factor, "far": now * 2.0})
        assert speed_epoch(store, "m", CPU, 1).name == "near"
        rewrite_epochs(store.path, key, {"far": now * 2.0, "farther": now * 4.0})
        begun = speed_epoch(store, "m", CPU, 1)
        assert begun.name not in ("far", "farther") and begun.drift == pytest.approx(0.5)
        assert set(recorded_epochs(store.path)[1]) == {"far", "farther", begun.name}


@pytest.mark.parametrize("damaged", ["{not json", "[1, 2]", '{"a": -1, "b": "x"}'])
def test_an_unreadable_epoch_record_counts_as_none(tmp_path: Path, damaged: str) -> None:
    with ProfileCache(tmp_path / "cache.sqlite") as store:
        speed_epoch(store, "m", CPU, 1)
        key, _ = recorded_epochs(store.path)
        rewrite_epochs_text(store.path, key, damaged)
        begun = speed_epoch(store, "m", CPU, 1)
        assert begun.drift is None and list(recorded_epochs(store.path)[1]) == [begun.name]
