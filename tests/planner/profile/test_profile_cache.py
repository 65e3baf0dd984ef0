"""The persistent SQLite cache: second runs are served from it, keys separate what must differ,
and two processes can use one file at once."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from planner.errors import InvalidInputError
from planner.ir.graph import load_graph
from planner.profile import QUICK_POLICY, ProfileCache, default_cache_path, profile_graph
from planner.profile.cache import QUERY_KEYS, CachedCost, CacheKey
from tests.support.fixture_zoo import FIXTURE_DIR

REPO = Path(__file__).resolve().parents[3]


def test_second_run_is_served_from_the_cache(tmp_path):
    graph = load_graph(FIXTURE_DIR / "cnn_bn_momentum.onnx")
    inputs = dict(np.load(FIXTURE_DIR / "cnn_bn_momentum.inputs.npz"))
    path = tmp_path / "cache.sqlite"
    first = profile_graph(graph, inputs=inputs, cache=path, policy=QUICK_POLICY)
    assert first.cache.hits == 0 and first.cache.misses > 0
    assert first.cache.misses + first.cache.deduplicated == len(graph.ops)
    second = profile_graph(graph, inputs=inputs, cache=path, policy=QUICK_POLICY)
    assert second.cache.hits == len(graph.ops) and second.cache.misses == 0
    assert all(o.costs["cpu"].cached for o in second.ops)
    for a, b in zip(first.ops, second.ops, strict=True):
        assert a.costs["cpu"].median_seconds == b.costs["cpu"].median_seconds
    # a different thread count is a different measurement
    other = profile_graph(graph, inputs=inputs, cache=path, policy=QUICK_POLICY, threads=2)
    assert other.cache.hits == 0


def test_cache_key_covers_signature_provider_threads_version_machine_clock_method():
    base = CacheKey("sig", "Add", "CPUExecutionProvider", 1, "1.31.1", "m1", "wall")
    variants = [
        CacheKey("sig2", "Add", "CPUExecutionProvider", 1, "1.31.1", "m1", "wall"),
        CacheKey("sig", "Add", "CUDAExecutionProvider", 1, "1.31.1", "m1", "wall"),
        CacheKey("sig", "Add", "CPUExecutionProvider", 4, "1.31.1", "m1", "wall"),
        CacheKey("sig", "Add", "CPUExecutionProvider", 1, "1.32.0", "m1", "wall"),
        CacheKey("sig", "Add", "CPUExecutionProvider", 1, "1.31.1", "m2", "wall"),
        CacheKey("sig", "Add", "CPUExecutionProvider", 1, "1.31.1", "m1", "thread-cpu"),
        CacheKey("sig", "Add", "CPUExecutionProvider", 1, "1.31.1", "m1", "wall", "old-rule"),
    ]
    assert len({base.digest, *(v.digest for v in variants)}) == 8


def test_signature_separates_shapes_and_attributes():
    from onnx import helper

    from planner.profile.signature import op_signature
    from tests.support.onnx_builders import make_model, value

    def sig(shape, perm):
        model = make_model([helper.make_node("Transpose", ["x"], ["y"], perm=perm)],
                           [value("x", shape)], [value("y", [shape[i] for i in perm])])
        graph = load_graph(model)
        return op_signature(graph, graph.ops[0])

    assert sig([2, 3], [1, 0]) == sig([2, 3], [1, 0])
    assert sig([2, 3], [1, 0]) != sig([3, 2], [1, 0])
    assert sig([2, 3], [1, 0]) != sig([2, 3], [0, 1])


def test_default_path_and_a_bad_cache_file(tmp_path, monkeypatch):
    monkeypatch.setenv("ARENAPLAN_CACHE_DIR", str(tmp_path / "dir"))
    assert default_cache_path() == tmp_path / "dir" / "profile-cache.sqlite"
    monkeypatch.delenv("ARENAPLAN_CACHE_DIR")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert default_cache_path() == tmp_path / ".cache" / "arenaplan" / "profile-cache.sqlite"
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"this is not a database" * 100)
    with pytest.raises(InvalidInputError, match="--no-cache"):
        ProfileCache(junk)


WRITER = textwrap.dedent("""
    import sys
    from planner.profile.cache import CacheKey, CachedCost, ProfileCache
    path, tag = sys.argv[1], sys.argv[2]
    with ProfileCache(path) as cache:
        for i in range(300):
            key = CacheKey(f"{tag}-{i}", "Add", "CPUExecutionProvider", 1, "v", "m", "wall")
            cache.put(key, CachedCost(True, i * 1e-6, 0.0, 10, 0))
            shared = CacheKey(f"shared-{i % 20}", "Add", "CPUExecutionProvider", 1, "v", "m",
                              "wall")
            cache.put(shared, CachedCost(True, 1e-6, 0.0, 10, 0))
            assert cache.get(key).median_s == i * 1e-6
""")


def test_two_processes_share_one_cache_file(tmp_path):
    path = tmp_path / "shared.sqlite"
    ProfileCache(path).close()
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), tag], cwd=REPO,
                              stderr=subprocess.PIPE, text=True) for tag in ("a", "b")]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    db.close()
    with ProfileCache(path) as cache:
        assert cache.count() == 300 + 300 + 20
        key = CacheKey("b-299", "Add", "CPUExecutionProvider", 1, "v", "m", "wall")
        assert cache.get(key) == CachedCost(True, 299e-6, 0.0, 10, 0, "")


def test_many_keys_are_looked_up_in_chunks_and_only_cached_ones_come_back(tmp_path):
    keys = [CacheKey(f"sig-{i}", "Add", "CPUExecutionProvider", 1, "v", "m", "wall")
            for i in range(2 * QUERY_KEYS + 7)]
    with ProfileCache(tmp_path / "c.sqlite") as cache:
        for i, key in enumerate(keys[::3]):
            cache.put(key, CachedCost(True, i * 1e-6, 0.0, 10, 0))
        found = cache.get_many(keys)
    assert set(found) == {key.digest for key in keys[::3]}
    assert found[keys[3].digest] == CachedCost(True, 1e-6, 0.0, 10, 0, "")
